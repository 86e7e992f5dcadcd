-- Writes one step of a slot's energy ledger (SPEC §4.12): a compare-and-set on the ledger's
-- mark, fenced like the controller's other writes (SPEC §5.1). One round trip.
-- KEYS[1] the slot's ledger hash, KEYS[2] the group's fence.
-- ARGV[1] the leader's token, ARGV[2] the mark the writer read ('' for none), ARGV[3] the new
-- mark, ARGV[4] n, then n pairs (day field, bucket), then the day fields to delete (trimmed).
-- Which days go is `domain::energy`'s rule, not the clock's: the ledger keeps its newest 401
-- days, and a step drops only those a newer day displaced (SPEC §4.12); the script deletes
-- exactly the fields it is given, after writing the new ones, as the domain applied them.
-- Returns {1, 'written'}, {0, 'moved'} (another writer moved the mark: read again) or
-- {0, 'fenced'}.
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return { 0, 'fenced' } end
local cur = redis.call('HGET', KEYS[1], 'mark')
if (cur or '') ~= ARGV[2] then return { 0, 'moved' } end
redis.call('HSET', KEYS[1], 'mark', ARGV[3])
local n = tonumber(ARGV[4])
for i = 0, n - 1 do
  redis.call('HSET', KEYS[1], ARGV[5 + 2 * i], ARGV[6 + 2 * i])
end
for i = 5 + 2 * n, #ARGV do
  redis.call('HDEL', KEYS[1], ARGV[i])
end
return { 1, 'written' }
