-- Creates one or more claims, all or none, each atomic with the check that its slot has no live
-- claim (SPEC §4.3). One round trip. This is what makes one live claim per slot airtight under
-- any number of writers, and a provider's IncreaseSize of several machines all or nothing.
--
-- KEYS[1] the group's claim index, KEYS[2] the group's fence, KEYS[3] the group's set of claims
-- that want a machine; then for claim i (from 0): KEYS[4+4i] the slot's live pointer,
-- KEYS[5+4i] the claim, KEYS[6+4i] its timeline, KEYS[7+4i] the slot's last-claim digest; last,
-- the group's count of changes (KEYS[#KEYS]), moved on (`count_change`) when the claims are created.
-- ARGV[1] the writer's leadership token ('' for a request), ARGV[2] the timeline's cap, ARGV[3]
-- the claim key prefix; then for claim i: ARGV[4+6i] its name, ARGV[5+6i] its JSON, ARGV[6+6i]
-- its request time (ms), ARGV[7+6i] its timeline entry, ARGV[8+6i] the digest its creator
-- seeded the attempt from ('' for none), ARGV[9+6i] '1' when it wants a machine.
--
-- Returns {1, n, ''} when all were created; otherwise nothing is written and {code, i, detail}
-- names the first claim (from 1) that could not be: code 0 when its slot has a live claim
-- (detail: that claim), -1 when a claim of its name exists, -2 when its slot's digest moved
-- since the creator read it (retry), -3 when the fence refuses the token (a controller's or the
-- leader's write is refused unless the group's fence holds its token; requests are not fenced).
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then return { -3, 0, 'fenced' } end
local n = (#KEYS - 4) / 4
local seen = {}
for i = 0, n - 1 do
  local live, claim, digest_key = KEYS[4 + 4 * i], KEYS[5 + 4 * i], KEYS[7 + 4 * i]
  local name, seed = ARGV[4 + 6 * i], ARGV[8 + 6 * i]
  if seen[live] then return { 0, i + 1, seen[live] } end
  seen[live] = name
  local holder = redis.call('GET', live)
  if holder then
    -- The pointer counts while the claim it names is live; one left by a foreign write is not.
    local raw = redis.call('GET', ARGV[3] .. holder)
    if raw then
      local ok, c = pcall(cjson.decode, raw)
      if not ok or c.phase == 'pending' or c.phase == 'booting' or c.phase == 'ready' then
        return { 0, i + 1, holder }
      end
    end
  end
  if redis.call('EXISTS', claim) == 1 then return { -1, i + 1, name } end
  if (redis.call('GET', digest_key) or '') ~= seed then return { -2, i + 1, '' } end
end
for i = 0, n - 1 do
  local name = ARGV[4 + 6 * i]
  redis.call('SET', KEYS[5 + 4 * i], ARGV[5 + 6 * i])
  redis.call('SET', KEYS[4 + 4 * i], name)
  redis.call('ZADD', KEYS[1], ARGV[6 + 6 * i], name)
  if ARGV[9 + 6 * i] == '1' then redis.call('SADD', KEYS[3], name) end
  redis.call('RPUSH', KEYS[6 + 4 * i], ARGV[7 + 6 * i])
  redis.call('LTRIM', KEYS[6 + 4 * i], -tonumber(ARGV[2]), -1)
end
count_change(KEYS[#KEYS])
return { 1, n, '' }
