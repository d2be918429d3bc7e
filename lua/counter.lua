#!lua flags=allow-cross-slot-keys
-- counter.lua: the slot rule kept in buckets, O(1) in Limit, for tenants
-- whose quotas are too large to log, one or more tenants a call. After
-- counter_prelude.lua (the window's layout), which package lua puts after
-- this line; the shebang without allow-oom makes Redis refuse the call
-- whole when it is over maxmemory, never halfway, and allow-cross-slot-keys
-- lets a call on a Redis Cluster node reach the windows of every slot the
-- node serves, as admit.lua's do.
--
-- KEYS, ARGV and reply are admit.lua's without IDs: KEYS[k] the k-th
-- tenant's window (or, on a cluster, the first, and ARGV starts with
-- "windows", m and the m windows: such a call must reach the node without
-- ASKING, as admit.lua's); ARGV nq, nq quotas (limit, window µs, max delay µs,
-- granularity µs), then per key its quota's index, not-before time µs
-- (0: none) and n > 0 requests; reply {now µs, per key per request outcome
-- (0 admitted, 1 deferred, 2 rejected), at µs, remaining, then per key its
-- retry hint µs}.
--
-- A new slot is the first free one (slotFrom) at or after the later of now,
-- the not-before time and the newest slot (FIFO); max delay is compared
-- with the rounded slot, from the later of now and the not-before time.
-- Once one request is rejected every later one is too. Cost: one GET and
-- one SET (or, for an admission in the ring's newest bucket, a SETRANGE of
-- the header) a key whatever the backlog, and an RPUSH when a deferral
-- drops a bucket a window from now still reaches.

-- write stores s at key, with a new expiry when the one set falls short of
-- a window past the newest slot (a window to spare, or MaxDelay/8, so that
-- a backlog moves it seldom), which the list gets too when made; the list
-- is cut to top - cur buckets, the most a window from now can reach.
local function write(key, s, window, maxDelay)
  local newest = max(s[3], now)
  local due = s[5] * 1000 < newest + window + s[1]
  if not due then
    call('SET', key, encode(s), 'KEEPTTL')
  else
    s[5] = math.ceil((newest + window + max(window, floor(maxDelay / 8)) + s[1]) / 1000) + 1
    call('SET', key, encode(s), 'PXAT', fmt(s[5]))
  end
  local keep = max(1, s[4] - floor(now / s[1]))
  if listed > keep then
    call('LTRIM', key .. ':o', -keep, -1)
  end
  if created or due and s[6] > 0 then
    call('PEXPIREAT', key .. ':o', fmt(s[5]))
  end
  listed, created = 0, false
end

-- decide appends to out the replies to n requests for key, whose window is
-- v (false: none), under quota q, starting no earlier than nb.
local function decide(out, key, v, q, nb, n)
  local limit, window, maxDelay, gran, width, span = q[1], q[2], q[3], q[4], q[5], q[6]
  local cur, start = floor(now / width), max(now, nb)

  -- Every slot is now, in the ring's newest bucket, the window has room
  -- after them all, and the expiry set holds: only the header changes.
  if v and HEADER then
    local w, sp, last, top, x, gone, total, count = struct.unpack(HEADER, v)
    if top == cur and w == width and sp == span and start == now and last <= now and
        total + n < limit and x * 1000 >= now + window + width then
      local o = #out
      for k = 1, n do
        out[o + 1], out[o + 2], out[o + 3], o = 0, now, limit - total - k, o + 3
      end
      out[o + 1] = 0 -- the hint: the window has room
      call('SETRANGE', key, 0, struct.pack(HEADER, w, sp, now, top, x, gone, total + n, count + n))
      return
    end
  end

  local s = v and decode(v)
  if not s or s[1] ~= width or s[2] ~= span then
    if s and s[6] > 0 then
      call('DEL', key .. ':o') -- its buckets are of the old width: see reshape
    end
    s = reshape(s, width, span, limit)
  end
  if cur > s[4] then
    advance(s, key, cur)
  end

  local retryAt, added = nil, false
  for _ = 1, n do
    local code, slot, raw, remaining = 2, retryAt, nil, 0
    if not retryAt then
      slot, raw = slotFrom(s, max(start, s[3]), limit, gran)
      if slot <= now then
        code = 0
      elseif slot - start <= maxDelay then
        code = 1
      else
        retryAt = min(raw, slot - maxDelay)
        slot = retryAt
      end
    end
    if code ~= 2 then
      local b = floor(slot / width)
      advance(s, key, b)
      s[RING + b % (span + 1)] = s[RING + b % (span + 1)] + 1
      s[7] = s[7] + 1
      s[3], added = max(s[3], slot), true
      if code == 0 then
        remaining = max(0, limit - sum(s, b - span, b))
      end
    end
    out[#out + 1], out[#out + 2], out[#out + 3] = code, slot, remaining
  end
  -- The hint speaks of requests without a not-before time: a rejection
  -- with one may not hold for them, so ask afresh.
  local hint = retryAt
  if not retryAt and max(now, s[3]) + window + 2 * width + gran - now <= maxDelay then
    hint = 0 -- the next free slot is at most a window and a bucket past the newest
  elseif not (retryAt and start == now) then
    local free, raw = slotFrom(s, max(now, s[3]), limit, gran)
    hint = free - now > maxDelay and min(raw, free - maxDelay) or 0
  end
  out[#out + 1] = hint
  if added then -- a call that records nothing writes nothing
    write(key, s, window, maxDelay)
  end
end

local keys, b = KEYS, 0 -- the quotas' ARGV starts after b
if ARGV[1] == 'windows' then
  keys = {}
  for k = 1, tonumber(ARGV[2]) do
    keys[k] = ARGV[2 + k]
  end
  b = 2 + #keys
end
local nq, quotas = tonumber(ARGV[b + 1]), {}
for i = 1, nq do
  local a = b + 4 * i - 2
  local window = tonumber(ARGV[a + 1])
  local width, span = shape(window)
  quotas[i] = {tonumber(ARGV[a]), window, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), width, span}
end

-- Every key is read before any is written, so that a key of the wrong type,
-- or one this cluster node does not serve, fails the call whole: a call
-- failed halfway would have recorded entries that a retry records again.
-- A key that comes again is read at its turn. A call of a cluster's
-- tenants (windows in ARGV) looks at each window's list too, which a write
-- may touch: in a slot moving away, the node refuses a key it no longer
-- holds.
local values, seen = {}, {}
for k = 1, #keys do
  if not seen[keys[k]] then
    seen[keys[k]] = true
    local v = redis.pcall('GET', keys[k])
    if type(v) == 'table' and v.err then
      if string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then
        return v
      end
      return redis.error_reply('WRONGTYPE ' .. keys[k] .. ' holds a ' .. call('TYPE', keys[k]).ok .. ', not a counter window')
    end
    if keys ~= KEYS then
      local o = redis.pcall('EXISTS', keys[k] .. ':o')
      if type(o) == 'table' and o.err then
        return o
      end
    end
    values[k] = v
  end
end
local out, a = {now}, b + 2 + 4 * nq
for k = 1, #keys do
  local v = values[k]
  if v == nil then
    v = call('GET', keys[k])
  end
  decide(out, keys[k], v, quotas[tonumber(ARGV[a])], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
  a = a + 3
end
return out
