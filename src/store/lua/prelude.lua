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
