-- Records the start of a shutdown of a machine no claim wants (law rows 2 and 11, SPEC §4.5),
-- atomic with the check that the slot still has no live claim. One round trip. A claim created
-- between the pass's read and this write wins: the shutdown is not recorded, so it never runs
-- (no machine a live claim wants is ever told to power off).
--
-- KEYS[1] the group's fence, KEYS[2] the slot's live pointer, KEYS[3] the group's operation
-- records, KEYS[4] the group's count of changes (moved on when recorded, `count_change`). ARGV[1] the writer's
-- token, ARGV[2] the claim key prefix, ARGV[3] the slot, ARGV[4] the operation's start (JSON).
--
-- Returns {1, ''} when recorded; {0, 'fenced'} or {0, <the live claim>} when refused.
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return { 0, 'fenced' } end
local holder = redis.call('GET', KEYS[2])
if holder then
  local raw = redis.call('GET', ARGV[2] .. holder)
  if raw then
    local ok, c = pcall(cjson.decode, raw)
    if not ok or c.phase == 'pending' or c.phase == 'booting' or c.phase == 'ready' then
      return { 0, holder }
    end
  end
end
redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
redis.call('HDEL', KEYS[3], ARGV[3] .. ':end', ARGV[3] .. ':off')
count_change(KEYS[4])
return { 1, '' }
