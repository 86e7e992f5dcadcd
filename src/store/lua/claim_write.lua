-- Writes a claim's next state: a compare-and-set on its version (SPEC §4.3). One round trip.
-- A write whose expected version is not the stored one writes nothing.
--
-- KEYS[1] the claim, KEYS[2] the slot's live pointer, KEYS[3] the timeline, KEYS[4] the slot's
-- last-claim digest, KEYS[6] the group's set of claims that want a machine, KEYS[7] the group's
-- operation records, KEYS[8] the group's count of changes (moved on by a write, `count_change`).
-- ARGV[1] the expected version, ARGV[2] the new JSON, ARGV[3] '1' when the new phase is terminal,
-- ARGV[4] a timeline entry ('' for none), ARGV[5] the timeline's cap, ARGV[6] the digest to keep
-- ('' for none), ARGV[7] the claim name, ARGV[9] '1' when the new state wants a machine,
-- ARGV[10] the slot, ARGV[11] the start of an operation this write records ('' for none): it
-- becomes the slot's operation record in the same step, replacing the last one with its outcome
-- and its observation (SPEC §5.4).
-- KEYS[9] the group's ended claims, KEYS[10] the group's claim index; ARGV[12] the most ended
-- claims the group keeps, ARGV[13] the claim key prefix, ARGV[14] the timeline key prefix: a
-- claim that ends joins the ended claims, and past the bound the oldest are collected here, with
-- their timelines, in the same step (SPEC §4.3). Their digests stay.
--
-- Returns {1, ''} when written, {0, why} when refused.
-- Fenced: a controller's write carries its leadership token (ARGV[8]); it is refused
-- unless the group's fence (KEYS[5]) holds that token. Requests ('' token) are not fenced.
if ARGV[8] ~= '' and redis.call('GET', KEYS[5]) ~= ARGV[8] then return { 0, 'fenced' } end
local raw = redis.call('GET', KEYS[1])
if not raw then return { 0, 'the claim does not exist' } end
local ok, c = pcall(cjson.decode, raw)
if not ok or type(c) ~= 'table' then return { 0, 'the stored claim is unreadable' } end
if tostring(c.version) ~= ARGV[1] then
  return { 0, 'the claim is at version ' .. tostring(c.version) .. ', not ' .. ARGV[1] }
end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[9] == '1' then
  redis.call('SADD', KEYS[6], ARGV[7])
else
  redis.call('SREM', KEYS[6], ARGV[7])
end
if ARGV[3] == '1' and redis.call('GET', KEYS[2]) == ARGV[7] then
  redis.call('DEL', KEYS[2])
end
if ARGV[6] ~= '' then redis.call('SET', KEYS[4], ARGV[6]) end
if ARGV[4] ~= '' then
  redis.call('RPUSH', KEYS[3], ARGV[4])
  redis.call('LTRIM', KEYS[3], -tonumber(ARGV[5]), -1)
end
if ARGV[11] ~= '' then
  redis.call('HSET', KEYS[7], ARGV[10], ARGV[11])
  redis.call('HDEL', KEYS[7], ARGV[10] .. ':end', ARGV[10] .. ':off')
end
if ARGV[3] == '1' then
  -- Scored by when it ended, in µs and strictly after the last: the order of the terminal
  -- writes, even when the clock steps back. A claim written terminal again keeps its place.
  local t = redis.call('TIME')
  local at = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.call('ZRANGE', KEYS[9], -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= at then at = tonumber(last[2]) + 1 end
  redis.call('ZADD', KEYS[9], 'NX', string.format('%d', at), ARGV[7])
  local over = redis.call('ZCARD', KEYS[9]) - tonumber(ARGV[12])
  if over > 0 then
    for _, name in ipairs(redis.call('ZRANGE', KEYS[9], 0, over - 1)) do
      redis.call('DEL', ARGV[13] .. name, ARGV[14] .. name)
      redis.call('ZREM', KEYS[10], name)
      redis.call('SREM', KEYS[6], name)
      redis.call('ZREM', KEYS[9], name)
    end
  end
end
count_change(KEYS[8])
return { 1, '' }
