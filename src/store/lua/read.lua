-- The cold fleet read (SPEC §2.5): the registry with its version, the server's TIME, every
-- registered bench's heartbeat value and the hold requests, in one round trip. Used when the
-- reader does not hold the registry yet, or its copy is out of date; afterwards the reader uses
-- one pipeline (version, HGETALL, MGET, TIME), which costs Redis a fraction of this script.
-- TIME is read after the keys: a key the MGET missed expired at or before the returned now.
--
-- KEYS[1] the registry, KEYS[2] the registry version, KEYS[3] the hold-request hash.
-- ARGV[1] the heartbeat key prefix (named by the key module).
local names = redis.call('SMEMBERS', KEYS[1])
local n = #names
local keys = {}
for i = 1, n do keys[i] = ARGV[1] .. names[i] end
local values = {}
-- MGET in chunks: unpack() is bounded by the Lua C stack (8000 values).
for first = 1, n, 4000 do
  local last = math.min(first + 3999, n)
  local v = redis.call('MGET', unpack(keys, first, last))
  for j = 1, last - first + 1 do values[first + j - 1] = v[j] end
end
-- A key MGET found nothing for may hold another type (something else wrote it): its type is
-- returned, so the bench reads DOWN saying why. A hold-request key of another type spoils no
-- bench: the requests are left out and the reader says so.
local wrong = {}
for i = 1, n do
  if not values[i] then
    local t = redis.call('TYPE', keys[i]).ok
    if t ~= 'none' then wrong[#wrong + 1] = { i, t } end
  end
end
local holds = redis.pcall('HGETALL', KEYS[3])
local holds_ok = 1
if type(holds) == 'table' and holds.err then holds, holds_ok = {}, 0 end
return {
  redis.call('GET', KEYS[2]) or '',
  redis.call('TIME'),
  names,
  values,
  holds,
  wrong,
  holds_ok,
}
