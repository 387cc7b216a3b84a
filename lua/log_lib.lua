-- log_lib: a group's log, shared by admit.lua and log_append.lua, which
-- append to it, and log_archived.lua, which trims it (package lua prepends
-- it), so an admission and its log entry are one atomic step.
--
-- A group's log is a stream, emq:{q}:log:<group>, one entry per event, its
-- ID "<sequence>-0": the group's sequence, gapless from 1, counted in the
-- hash emq:{q}:logseq (group -> last sequence) beside the logs. An entry
-- holds the fields id, type, at (server ms) and data, all the caller's but
-- at.
--
-- Every append is also announced on the queue's change stream,
-- emq:{q}:logchanges, an entry {g = group, s = sequence} under an ID the
-- server picks, so a reader following many logs blocks on that one stream
-- instead of on every log; it keeps about the newest log_changes_keep.
-- A script that appends several entries to one log (in one append or
-- several) announces the last alone: its readers read the log after their
-- position, so the sequence tells them all they need, and each
-- announcement costs an XADD here and a parse in every reader.
--
-- log_append(log, sequences, changes, group, id, type, data, at)
--   appends one entry, announces it and returns its sequence. It drops
--   nothing: a log drops only entries its archiver has marked as kept
--   elsewhere (log_archived.lua), so no entry is lost that was not
--   archived.
-- log_append_unannounced(log, sequences, group, id, type, data, at)
--   is log_append without the announcement; log_announce(changes, group,
--   sequence) makes it, for the last of the entries.
-- log_append_batch(log, sequences, group, args, from, n, at) appends n
--   entries unannounced, their id, type and data args[from], ... in
--   triples, taking their n sequences with one HINCRBY; it returns the
--   last.

local log_changes_keep = 100000

-- log_entry_at is an entry's at field (server ms), from its field list.
local function log_entry_at(fields)
  for i = 1, #fields, 2 do
    if fields[i] == 'at' then return tonumber(fields[i + 1]) end
  end
  return nil
end

local function log_append_unannounced(log, sequences, group, id, kind, data, at)
  local sequence = redis.call('HINCRBY', sequences, group, 1)
  redis.call('XADD', log, sequence .. '-0', 'id', id, 'type', kind, 'at', at, 'data', data)
  return sequence
end

local function log_append_batch(log, sequences, group, args, from, n, at)
  local last = redis.call('HINCRBY', sequences, group, n)
  local sequence = last - n
  for i = from, from + 3 * (n - 1), 3 do
    sequence = sequence + 1
    redis.call('XADD', log, sequence .. '-0', 'id', args[i], 'type', args[i + 1], 'at', at, 'data', args[i + 2])
  end
  return last
end

local function log_announce(changes, group, sequence)
  redis.call('XADD', changes, 'MAXLEN', '~', log_changes_keep, '*', 'g', group, 's', sequence)
end

local function log_append(log, sequences, changes, group, id, kind, data, at)
  local sequence = log_append_unannounced(log, sequences, group, id, kind, data, at)
  log_announce(changes, group, sequence)
  return sequence
end
