-- One beat: the bench's own word that it is there (SPEC §2.4). One round trip.
--
-- KEYS[1] the heartbeat key, KEYS[2] the bench's join key (its registration, and when it last
-- beat with a TTL: a report for the views).
-- ARGV[1] the bench name, ARGV[2] the TTL in ms, ARGV[3] an explicit hold ('' for none),
-- ARGV[4] the load ('' for unknown), ARGV[5] the cores ('' for unknown), ARGV[6] the
-- hold-request hash, ARGV[7] the join set, ARGV[8] the bench's power-off request and ARGV[9] its
-- acknowledgement of one (both absent from an older caller), ARGV[10] the wake channel (absent
-- from an older caller: nothing is published).
--
-- The hold-request hash and the join set are arguments, not KEYS: EVAL asks for write permission
-- on every key it declares, and a bench's own Redis user may only read the hold requests and add
-- to the join set (SPEC §2.11). Every key here shares the hash tag, so the script still touches
-- one Redis Cluster slot. The beat writes nothing shared that a bench could use against another:
-- its own two keys, and its name in the join set, where a name counts only with its join key or its heartbeat key.
--
-- The server's clock stamps the beat (TIME) and the expiry is that stamp plus the TTL (PXAT), so
-- the bench's own clock is never part of the promise and the key expires exactly at the
-- deadline its value states (PX would start from the SET's own instant, a little later). A TTL
-- of 0 expires at once: the key is deleted, since a deadline of now is no expiry to set. With no
-- explicit hold, the beat carries the operator's hold request while it has not lapsed, so HELD
-- always means the bench said it.
--
-- A request is carried only when the reader would accept it (the rule of
-- `store::presence::decode_request` and `domain::name::Reason::parse`, kept the same here and
-- tested against it): a reason of 1 to 256 characters of valid UTF-8, no control character, not
-- all white space; a lapse, if any, a whole number of ms within ±8e15. A request that breaks it
-- (a foreign write) is not carried, so it cannot make a running bench read DOWN; the beat
-- reports it instead.
--
-- The power-off request and the bench's own acknowledgement (SPEC §4.10) are read here, like the
-- hold request, so the agent learns of an off in the beat's one round trip; the agent decides
-- from them. They are read with pcall: a bench user from an ACL file written before them may
-- not read them, which costs the off (said in the reply), never the beat.
--
-- A beat that changes its bench's state announces it (SPEC §4.5): the bench's name is published
-- with SPUBLISH on the wake channel, a sharded channel under the same hash tag as the keys (so the
-- script stays in one Redis Cluster slot), and the controller passes at once instead of at its
-- next tick. A change is a key that was not there (a first beat, or one after the key expired), a
-- key that no longer counted (past its deadline, from the server's future, unreadable), a hold put
-- on, taken off or changed, a deadline brought forward (a shorter TTL than what is left), or a TTL
-- of 0 deleting a key that counted. A steady beat, the same hold over a key that still counts
-- with a deadline no earlier, publishes nothing, so a fleet at rest costs the controller
-- nothing. It is published with pcall: a bench user from an ACL file written before the channel
-- may not publish, which costs the wake (the controller's next tick sees the change), never the
-- beat. The message is only a hint; the controller reads the keys again.
--
-- Returns { now, the hold carried (nil for none), why a request was not carried ('' if none),
-- the hold-request key when it holds another type than a hash ('' if not), the power-off
-- request ('' if none), the acknowledgement ('' if none), why they could not be read ('' if
-- they could) }.

-- White space that is not a control character (Unicode White_Space, as Rust's
-- char::is_whitespace; the control ones are refused before).
local space = {
  [0x20] = true, [0xA0] = true, [0x1680] = true, [0x2028] = true, [0x2029] = true,
  [0x202F] = true, [0x205F] = true, [0x3000] = true,
}
for cp = 0x2000, 0x200A do space[cp] = true end

local function reason_ok(s)
  if type(s) ~= 'string' then return false, 'the reason is not text' end
  local i, len, n, blank = 1, #s, 0, true
  while i <= len do
    local c = s:byte(i)
    local cp, size
    if c < 0x80 then cp, size = c, 1
    elseif c >= 0xC2 and c <= 0xDF then cp, size = c - 0xC0, 2
    elseif c >= 0xE0 and c <= 0xEF then cp, size = c - 0xE0, 3
    elseif c >= 0xF0 and c <= 0xF4 then cp, size = c - 0xF0, 4
    else return false, 'the reason is not UTF-8' end
    if i + size - 1 > len then return false, 'the reason is not UTF-8' end
    for k = i + 1, i + size - 1 do
      local b = s:byte(k)
      if b < 0x80 or b > 0xBF then return false, 'the reason is not UTF-8' end
      cp = cp * 64 + (b - 0x80)
    end
    if (size == 3 and (cp < 0x800 or (cp >= 0xD800 and cp <= 0xDFFF)))
      or (size == 4 and (cp < 0x10000 or cp > 0x10FFFF)) then
      return false, 'the reason is not UTF-8'
    end
    if cp < 0x20 or (cp >= 0x7F and cp <= 0x9F) then
      return false, 'the reason has a control character'
    end
    if not (space[cp] or false) then blank = false end
    n = n + 1
    i = i + size
  end
  if blank then return false, 'the reason is empty' end
  if n > 256 then return false, 'the reason is longer than 256 characters' end
  return true, ''
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local holds, joined = ARGV[6], ARGV[7]
local hold = ARGV[3]
local ignored = ''
local problem = ''
if hold == '' then
  hold = false
  -- A hold-request key of another type (a foreign write) costs the requests, never the beat:
  -- every bench would read DOWN within a TTL.
  local raw = redis.pcall('HGET', holds, ARGV[1])
  if type(raw) == 'table' and raw.err then
    problem = holds
  elseif raw then
    local ok, request = pcall(cjson.decode, raw)
    if not ok or type(request) ~= 'table' then
      ignored = 'the hold request is not a request'
    else
      local valid, why = reason_ok(request.reason)
      local lapse = request['until']
      if lapse == cjson.null then lapse = nil end
      if valid and lapse ~= nil and (type(lapse) ~= 'number' or lapse ~= math.floor(lapse)
          or lapse > 8e15 or lapse < -8e15) then
        valid, why = false, 'the lapse is not a time'
      end
      if not valid then
        ignored = why
      elseif lapse ~= nil and lapse <= now then
        -- Cleared by a user that may write the requests. A bench's own user may not (SPEC
        -- §2.11); every reader judges the lapse itself, so the field then waits, harmless, for
        -- the bench's next `fleet hold`, `release` or `forget`.
        if redis.acl_check_cmd('HDEL', holds, ARGV[1]) then redis.call('HDEL', holds, ARGV[1]) end
      else
        hold = request.reason
      end
    end
  end
end
-- The key as the beat found it, to tell a change of state from a steady beat (below). With pcall:
-- a key of another type reads as no key, which it is to every reader.
local before = redis.pcall('GET', KEYS[1])
if type(before) ~= 'string' then before = false end

-- Whether the key as found counted, with which hold (false for none) and until when: the
-- reader's rule (SPEC §2.2) in short. What does not decode, or is past its deadline, or was
-- written more than a second in the server's future, did not count.
local function counted(raw)
  if not raw then return false, false, 0 end
  local ok, old = pcall(cjson.decode, raw)
  if not ok or type(old) ~= 'table' or type(old.at) ~= 'number' or type(old.ttl) ~= 'number'
      or old.at + old.ttl <= now or old.at > now + 1000 then
    return false, false, 0
  end
  local held = old.hold
  if type(held) ~= 'string' then held = false end
  return true, held, old.at + old.ttl
end

-- Registration: the name in the join set (a new member tells readers that hold the registry to
-- read it again: the set's size moved) and the bench's own join key, which makes the name count.
redis.call('SADD', joined, ARGV[1])
if ttl <= 0 then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], '0', 'NX')
else
  redis.call('SET', KEYS[2], string.format('%d', now))
  local beat = { v = 1, at = now, ttl = ttl }
  if hold then beat.hold = hold end
  if ARGV[4] ~= '' then beat.load = tonumber(ARGV[4]) end
  if ARGV[5] ~= '' then beat.cores = tonumber(ARGV[5]) end
  redis.call('SET', KEYS[1], cjson.encode(beat), 'PXAT', now + ttl)
end
local was, was_held, was_until = counted(before)
local changed
if ttl <= 0 then
  changed = was
else
  -- A deadline brought forward is announced too: the controller waits for the deadline it last
  -- read (SPEC §4.5), and a steady beat only ever moves it later.
  changed = not was or was_held ~= (hold or false) or now + ttl < was_until
end
if changed and ARGV[10] and ARGV[10] ~= '' then
  redis.pcall('SPUBLISH', ARGV[10], ARGV[1])
end
local off, ack, off_problem = '', '', ''
if ARGV[8] and ARGV[8] ~= '' then
  local request = redis.pcall('GET', ARGV[8])
  local answer = redis.pcall('GET', ARGV[9])
  for _, got in ipairs({ request, answer }) do
    if type(got) == 'table' and got.err and off_problem == '' then off_problem = got.err end
  end
  if type(request) == 'string' then off = request end
  if type(answer) == 'string' then ack = answer end
end
return { now, hold, ignored, problem, off, ack, off_problem }
