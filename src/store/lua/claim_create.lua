-- Creates a claim, atomic with the check that its slot has no live claim (SPEC §4.3). One round
-- trip. This is what makes one live claim per slot airtight under any number of writers.
--
-- KEYS[1] the slot's live pointer, KEYS[2] the claim, KEYS[3] the group's claim index,
-- KEYS[4] the claim's timeline, KEYS[5] the slot's last-claim digest, KEYS[7] the group's set of
-- claims that want a machine.
-- ARGV[1] the claim name, ARGV[2] its JSON, ARGV[3] its request time (ms), ARGV[4] the timeline
-- entry, ARGV[5] the timeline's cap, ARGV[6] the claim key prefix, ARGV[7] the digest the creator
-- seeded the attempt from ('' for none), ARGV[9] '1' when the claim wants a machine.
--
-- Returns {1, name} when created; {0, holder} when the slot has a live claim; {-1, name} when a
-- claim of that name exists; {-2, ''} when the digest moved since the creator read it (retry).
-- Fenced: a controller's write carries its leadership token (ARGV[8]); it is refused
-- unless the group's fence (KEYS[6]) holds that token. Requests ('' token) are not fenced.
if ARGV[8] ~= '' and redis.call('GET', KEYS[6]) ~= ARGV[8] then return { -3, 'fenced' } end
local holder = redis.call('GET', KEYS[1])
if holder then
  -- The pointer counts while the claim it names is live; one left by a foreign write is not.
  local raw = redis.call('GET', ARGV[6] .. holder)
  if raw then
    local ok, c = pcall(cjson.decode, raw)
    if not ok or c.phase == 'pending' or c.phase == 'booting' or c.phase == 'ready' then
      return { 0, holder }
    end
  end
end
if redis.call('EXISTS', KEYS[2]) == 1 then return { -1, ARGV[1] } end
local digest = redis.call('GET', KEYS[5]) or ''
if digest ~= ARGV[7] then return { -2, '' } end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
if ARGV[9] == '1' then redis.call('SADD', KEYS[7], ARGV[1]) end
redis.call('RPUSH', KEYS[4], ARGV[4])
redis.call('LTRIM', KEYS[4], -tonumber(ARGV[5]), -1)
return { 1, ARGV[1] }
