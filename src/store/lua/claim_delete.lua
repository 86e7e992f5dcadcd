-- Deletes a claim: a pending claim cancelled, or a terminal claim collected (SPEC §4.3). A
-- compare-and-set on its version, like every claim write. One round trip.
--
-- KEYS[1] the claim, KEYS[2] the slot's live pointer, KEYS[3] the group's claim index,
-- KEYS[4] the timeline, KEYS[6] the group's set of claims that want a machine, KEYS[7] the
-- group's count of changes (moved on by a deletion, `count_change`), KEYS[8] the group's ended
-- claims (a collected claim leaves them).
-- ARGV[1] the expected version, ARGV[2] the claim name, ARGV[3] a timeline entry ('' for none),
-- ARGV[4] the timeline's cap, ARGV[5] how long the timeline outlives the claim (ms).
-- Fenced: a controller's write carries its leadership token (ARGV[6]); it is refused
-- unless the group's fence (KEYS[5]) holds that token. Requests ('' token) are not fenced.
if ARGV[6] ~= '' and redis.call('GET', KEYS[5]) ~= ARGV[6] then return { 0, 'fenced' } end
local raw = redis.call('GET', KEYS[1])
if not raw then return { 0, 'the claim does not exist' } end
local ok, c = pcall(cjson.decode, raw)
if ok and type(c) == 'table' and tostring(c.version) ~= ARGV[1] then
  return { 0, 'the claim is at version ' .. tostring(c.version) .. ', not ' .. ARGV[1] }
end
redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('SREM', KEYS[6], ARGV[2])
redis.call('ZREM', KEYS[8], ARGV[2])
count_change(KEYS[7])
if ARGV[3] ~= '' then
  redis.call('RPUSH', KEYS[4], ARGV[3])
  redis.call('LTRIM', KEYS[4], -tonumber(ARGV[4]), -1)
end
redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[5]))
return { 1, '' }
