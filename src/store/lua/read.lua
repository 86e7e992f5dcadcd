-- The atomic fleet read (SPEC §2.5): the registry with its version, the server's TIME, every
-- registered bench's heartbeat value and the hold requests, in one round trip. Used only when
-- the cold read's listing of the registry cannot be used (a set of another type) or the
-- registry changed under it three times running; the reader otherwise lists the registry and
-- sends one pipeline (version, sizes, HGETALL, MGET, TIME), which costs Redis a fraction of this
-- script.
-- TIME is read after the keys: a key the MGET missed expired at or before the returned now. Read
-- only: sent with EVAL_RO, so a user that may only read (`fleet-viewer`) runs it.
--
-- KEYS[1] the registry, KEYS[2] the registry version, KEYS[3] the hold-request hash, KEYS[4] the
-- join set.
-- ARGV[1] the heartbeat key prefix, ARGV[2] the join key prefix (named by the key module).
--
-- The benches are the registry's members and the join set's members whose own join key or
-- heartbeat key exists: a bench's user may add any name to the join set, but write only its own
-- two keys (SPEC §2.11). The join set's other members are returned apart, so a reader holding the registry
-- checks in its pipeline whether one of them got its key since.
local registered = redis.call('SMEMBERS', KEYS[1])
local joined = redis.call('SMEMBERS', KEYS[4])
local names, known = {}, {}
for i = 1, #registered do
  names[i] = registered[i]
  known[registered[i]] = true
end
local candidates = {}
for i = 1, #joined do
  if not known[joined[i]] then candidates[#candidates + 1] = joined[i] end
end
local unproven = {}
-- MGET in chunks: unpack() is bounded by the Lua C stack (8000 values).
for first = 1, #candidates, 4000 do
  local last = math.min(first + 3999, #candidates)
  local keys = {}
  for i = first, last do keys[#keys + 1] = ARGV[2] .. candidates[i] end
  local v = redis.call('MGET', unpack(keys))
  for j = 1, #keys do
    local name = candidates[first + j - 1]
    -- A candidate counts when either of its own two keys exists, whatever it holds, as the
    -- listed read counts it (SPEC §2.3).
    if v[j] or redis.call('EXISTS', keys[j], ARGV[1] .. name) > 0 then
      names[#names + 1] = name
    else
      unproven[#unproven + 1] = name
    end
  end
end
local n = #names
local keys = {}
for i = 1, n do keys[i] = ARGV[1] .. names[i] end
local values = {}
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
  #registered,
  #joined,
  unproven,
}
