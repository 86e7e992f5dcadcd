-- Records a slot's BMC power reading (SPEC §4.10), fenced like the controller's other writes
-- (SPEC §5.1). One round trip.
--
-- KEYS[1] the group's fence, KEYS[2] the slot's BMC reading.
-- ARGV[1] the leader's token, ARGV[2] the state (on, off or unknown), ARGV[3] why it is unknown
-- ('' for none), ARGV[4] how long the reading stands in ms.
--
-- Stamped with the server's clock, so its age is judged by the one clock fleet judges by, and
-- expiring on it (PX): a reader that stops leaves no reading behind once it has lapsed.
-- Returns the server ms of the reading, or -1 when fenced.
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reading
if ARGV[3] == '' then
  reading = string.format('{"v":1,"state":%s,"at":%d}', cjson.encode(ARGV[2]), now)
else
  reading = string.format('{"v":1,"state":%s,"at":%d,"why":%s}', cjson.encode(ARGV[2]), now,
    cjson.encode(ARGV[3]))
end
redis.call('SET', KEYS[2], reading, 'PX', tonumber(ARGV[4]))
return now
