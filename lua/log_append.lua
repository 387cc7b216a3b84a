-- log_append: append entries to a group's log (see log_lib.lua), each with
-- the group's next sequence, unless their source appended them already.
--
-- A source is a writer whose entries come in numbered batches, version 1,
-- 2, ... per source (e.g. an outbox's rows): a batch is appended once, and
-- only after the batch before it, so a redelivered batch never takes a
-- second sequence and the log keeps the source's order. The hash
-- emq:{q}:logsrc holds each source's last version appended.
--
-- KEYS[1] emq:{q}:log:<group>  stream the group's log
-- KEYS[2] emq:{q}:logseq       hash   group -> last sequence
-- KEYS[3] emq:{q}:logsrc       hash   source -> last version appended
-- KEYS[4] emq:{q}:logchanges   stream every append, announced: one entry
--                              per call, with its last sequence (log_lib.lua)
--
-- ARGV[1] group
-- ARGV[2] source; '' for none: the entries are appended whatever came before
-- ARGV[3] the batch's version within its source (ignored without a source)
-- ARGV[4] '1' to append even past a gap in the source's versions (the
--         caller found the versions missing gone for good); else '0'
-- ARGV[5..] id, type, data, repeated once per entry, in order
--
-- Reply: {sequence of the first entry appended (0: none), entries appended,
--        the source's last version appended after the call}
--   error "EMQLOGGAP <held>"  the source's versions up to ARGV[3] - 1 are not
--                             all appended (<held> is the last that is);
--                             nothing written
--   error "EMQARG ..."        an argument is malformed; nothing written

local group, source, version, force = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
if (#ARGV - 4) % 3 ~= 0 then
  return redis.error_reply('EMQARG want group, source, version, force and id, type, data triples')
end

local held = 0
if source ~= '' then
  if not version or version < 1 then
    return redis.error_reply('EMQARG version "' .. tostring(ARGV[3]) .. '" is not a positive integer')
  end
  held = tonumber(redis.call('HGET', KEYS[3], source) or '0')
  if version <= held then
    return {0, 0, held}
  end
  if version > held + 1 and not force then
    return redis.error_reply('EMQLOGGAP ' .. held)
  end
end

local at = now()
local first, last = 0, 0
for i = 5, #ARGV, 3 do
  last = log_append_unannounced(KEYS[1], KEYS[2], group, ARGV[i], ARGV[i + 1], ARGV[i + 2], at)
  if first == 0 then first = last end
end
-- One announcement for the batch: its last sequence.
if last > 0 then log_announce(KEYS[4], group, last) end
if source ~= '' then
  redis.call('HSET', KEYS[3], source, version)
  held = version
end
return {first, (#ARGV - 4) / 3, held}
