-- Records on the slot's operation record that the machine was observed off after a shutdown, or
-- puts back a record the store lost (SPEC §5.4). Fenced, like every controller write. One round
-- trip.
--
-- KEYS[1] the group's fence, KEYS[2] the group's operation records, KEYS[3] the group's count of
-- changes (moved on by a write, `count_change`). ARGV[1] the writer's token,
-- ARGV[2] the slot, ARGV[3] the record's start time (ms), ARGV[4] 'off' or 'restore', then for
-- 'off': ARGV[5] when the machine was observed off (ms); for 'restore': ARGV[5] the start (JSON),
-- ARGV[6] the outcome (JSON, '' for none), ARGV[7] when observed off ('' for never).
--
-- 'off' writes only onto the same operation; 'restore' writes only when the store has no record
-- of the slot or an older one. Returns 1 when written, 0 when not, -1 when fenced.
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local raw = redis.call('HGET', KEYS[2], ARGV[2])
local stored = nil
if raw then
  local ok, start = pcall(cjson.decode, raw)
  if ok and type(start) == 'table' then stored = tonumber(start.started_at) end
end
if ARGV[4] == 'off' then
  if stored == nil or stored ~= tonumber(ARGV[3]) then return 0 end
  if redis.call('HEXISTS', KEYS[2], ARGV[2] .. ':off') == 1 then return 0 end
  redis.call('HSET', KEYS[2], ARGV[2] .. ':off', ARGV[5])
  count_change(KEYS[3])
  return 1
end
if raw and (stored == nil or stored >= tonumber(ARGV[3])) then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[5])
redis.call('HDEL', KEYS[2], ARGV[2] .. ':end', ARGV[2] .. ':off')
if ARGV[6] ~= '' then redis.call('HSET', KEYS[2], ARGV[2] .. ':end', ARGV[6]) end
if ARGV[7] ~= '' then redis.call('HSET', KEYS[2], ARGV[2] .. ':off', ARGV[7]) end
count_change(KEYS[3])
return 1
