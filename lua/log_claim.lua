-- log_claim: claim groups' logs for one archiver a while, so that the
-- archivers sharing a queue's logs do not read and copy the same entries
-- at once (each but the first would find them copied already).
--
-- A claim is a hint, not a fence: the archive refuses what it holds
-- already, so two archivers copying one log at once (a claim that expired
-- under its holder) waste work and write nothing twice. A holder renews
-- its claims each time it claims them again; a claim nobody renews
-- expires after ttl_ms (its holder stopped, or the log went quiet). A
-- holder whose copy failed releases its claims (ttl_ms 0), so another
-- archiver takes the logs over at once.
--
-- KEYS[i] emq:{q}:logclaim:<group>  string  the holder, expiring (PX)
--
-- ARGV[1] the holder
-- ARGV[2] ttl_ms: how long a claim lasts unless renewed; 0 releases the
--         holder's claims of the keys instead
--
-- Reply: {1 or 0 for each key in KEYS}: 1 when the holder holds the claim
--        now (taken or renewed), 0 when another holds it; on a release,
--        1 when the holder held it (now released)
--   error "EMQARG ..."  an argument is malformed; nothing written

local holder, ttl = ARGV[1], tonumber(ARGV[2])
if not holder or holder == '' or not ttl or ttl < 0 then
  return redis.error_reply('EMQARG want a holder and a ttl_ms of 0 or more')
end

local held = {}
for i, key in ipairs(KEYS) do
  local current = redis.call('GET', key)
  if ttl == 0 then
    if current == holder then
      redis.call('DEL', key)
      held[i] = 1
    else
      held[i] = 0
    end
  elseif not current or current == holder then
    redis.call('SET', key, holder, 'PX', ttl)
    held[i] = 1
  else
    held[i] = 0
  end
end
return held
