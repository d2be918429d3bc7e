-- counter.lua: the approximate, O(1)-in-Limit mode of the slot rule, for
-- tenants whose quotas are too large to log every entry.
--
-- KEYS[1]  the tenant's counters: a HASH of bucket index -> count, where a
--          bucket is window/buckets µs of Redis time, plus the field "last":
--          the newest slot handed out, in µs
-- ARGV[1]  limit
-- ARGV[2]  window µs
-- ARGV[3]  max delay µs
-- ARGV[4]  granularity µs (1 = none)
-- ARGV[5]  buckets per window
-- ARGV[6]  n, the number of requests, decided in order; 0 asks for usage
-- ARGV[7]  (with n > 0) a bucket to release an entry from instead: n must be 1
-- Returns  {now µs, then for each request: outcome, at µs, remaining;
--          then the retry hint µs}
--          outcome 0 admitted, 1 deferred, 2 rejected, and the retry hint,
--          as in admit.lua;
--          for n = 0: {now µs, entries counted in the window, entries ahead,
--          next free slot µs}, writing nothing;
--          for a release: {now µs, 1 if an entry was released else 0}
--
-- MaxDelay is compared with the rounded slot, as in admit.lua.
-- A slot is free when the buckets that overlap the window ending at it hold
-- fewer than limit entries. Counting every overlapping bucket whole is an
-- upper bound on the true count, so the mode never admits more than limit in
-- any window; the price is under-admission by at most one bucket's time.
-- Slots never go backwards (the field "last"), and once one request is
-- rejected every later one is too.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local maxDelay = tonumber(ARGV[3])
local gran = tonumber(ARGV[4])
local width = math.max(1, math.floor(window / tonumber(ARGV[5])))
local span = math.ceil(window / width) -- buckets before the current one that a window can reach
local n = tonumber(ARGV[6])

local cur = math.floor(now / width)
local counts = {}
local last = now
local raw = redis.call('HGETALL', key)
local stale = {}
for i = 1, #raw, 2 do
  if raw[i] == 'last' then
    last = math.max(last, tonumber(raw[i + 1]))
  else
    local b = tonumber(raw[i])
    if b < cur - span then
      stale[#stale + 1] = raw[i]
    else
      counts[b] = tonumber(raw[i + 1])
    end
  end
end
if n > 0 and #stale > 0 then
  redis.call('HDEL', key, unpack(stale))
end

-- load returns the entries in the buckets a window ending in bucket b can
-- overlap, and the oldest of those buckets that holds any.
local function load(b)
  local sum, oldest = 0, nil
  for k, c in pairs(counts) do
    if k >= b - span and k <= b and c > 0 then
      sum = sum + c
      if not oldest or k < oldest then
        oldest = k
      end
    end
  end
  return sum, oldest
end

-- ceil rounds x up to a multiple of the granularity; fmod is exact.
local function ceil(x)
  local r = math.fmod(x, gran)
  if r > 0 then
    return x - r + gran
  end
  return x
end

-- slotFrom returns the first free slot at or after t, rounded up to the
-- granularity when it lies ahead, and the first moment a request would be
-- admitted there without rounding.
local function slotFrom(t)
  local raw = nil
  for _ = 1, 10000 do
    local b = math.floor(t / width)
    local sum, oldest = load(b)
    if sum < limit then
      if t <= now then
        return now, now
      end
      raw = raw or t
      if math.fmod(t, gran) == 0 then
        return t, raw
      end
      t = ceil(t) -- check the bucket the rounded slot falls in
      if math.floor(t / width) == b then
        return t, raw
      end
    else
      -- Nothing frees up before the oldest counted bucket leaves.
      t = math.max(t, (oldest + span + 1) * width)
      raw = nil
    end
  end
  return t, raw or t
end

if ARGV[7] then
  -- Release: only from a bucket still counted, and never below zero.
  local b = tonumber(ARGV[7])
  if counts[b] and counts[b] > 0 then
    redis.call('HINCRBY', key, ARGV[7], -1)
    return {now, 1}
  end
  return {now, 0}
end

if n == 0 then
  local ahead = 0
  for k, c in pairs(counts) do
    if k > cur then
      ahead = ahead + c
    end
  end
  gran = 1
  return {now, (load(cur)), ahead, (slotFrom(math.max(now, last)))}
end

local out = {now}
local retryAt = nil
local added = false
for _ = 1, n do
  local code, slot = 2, retryAt
  if not retryAt then
    local raw
    slot, raw = slotFrom(math.max(now, last))
    if slot <= now then
      code = 0
    elseif slot - now <= maxDelay then
      code = 1
    else
      retryAt = math.min(raw, slot - maxDelay)
      slot = retryAt
    end
  end
  local remaining = 0
  if code ~= 2 then
    local b = math.floor(slot / width)
    counts[b] = (counts[b] or 0) + 1
    redis.call('HINCRBY', key, string.format('%.0f', b), 1)
    last = slot
    added = true
    if code == 0 then
      remaining = math.max(0, limit - load(b))
    end
  end
  out[#out + 1] = code
  out[#out + 1] = slot
  out[#out + 1] = remaining
end
local hint = retryAt or 0
if not retryAt then
  local free, raw = slotFrom(math.max(now, last))
  if free - now > maxDelay then
    hint = math.min(raw, free - maxDelay)
  end
end
out[#out + 1] = hint
if added then
  redis.call('HSET', key, 'last', string.format('%.0f', last))
  redis.call('PEXPIRE', key, math.ceil((last + window + width - now) / 1000) + 1)
end
return out
