-- Put before every script of fleet (store::script). Within the script, `redis.call` is this
-- wrapper: a command that meets a key of another type than fleet writes there (a foreign write)
-- fails naming that key, rather than Redis's bare WRONGTYPE, which names none. Everything else
-- is Redis's own (`redis.pcall` included).
local redis = (function(r)
  local function call(...)
    local reply = r.pcall(...)
    if type(reply) == 'table' and reply.err then
      local key = select(2, ...)
      if string.sub(reply.err, 1, 9) == 'WRONGTYPE' and key then
        error({ err = 'WRONGTYPE the key ' .. tostring(key) .. ' holds another type than fleet writes there' })
      end
      error(reply)
    end
    return reply
  end
  return setmetatable({ call = call }, { __index = r })
end)(redis)

-- One more in a group's count of changes (the batched claims read's proof, SPEC §4.3), and then
-- at least the server's time in µs: a failover that loses writes rolls the count back, and a
-- write after it must not give the count a value a reader already saw with other claims (the
-- lease's epoch moves the same way).
local function count_change(key)
  local n = redis.call('INCR', key)
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if n < us then redis.call('SET', key, string.format('%d', us)) end
end
