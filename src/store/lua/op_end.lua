-- Records how an operation ended on the slot's operation record (SPEC §5.4), once: only when the
-- record is still that operation's (its start time matches) and no outcome is recorded yet. One
-- round trip. Written by the operation wrapper, or by the controller that ran the operation;
-- not fenced: an outcome is a fact of the operation, whoever leads.
--
-- KEYS[1] the group's operation records, KEYS[2] the group's count of changes (moved on, `count_change`, when
-- recorded). ARGV[1] the slot, ARGV[2] the operation's start time
-- (ms), ARGV[3] the outcome (JSON). The end time is the server's.
--
-- Returns 1 when recorded, 0 when the record is another operation's or already has an outcome.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local ok, start = pcall(cjson.decode, raw)
if not ok or type(start) ~= 'table' or tonumber(start.started_at) ~= tonumber(ARGV[2]) then return 0 end
if redis.call('HEXISTS', KEYS[1], ARGV[1] .. ':end') == 1 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local done = cjson.decode(ARGV[3])
done.finished_at = now
redis.call('HSET', KEYS[1], ARGV[1] .. ':end', cjson.encode(done))
count_change(KEYS[2])
return 1
