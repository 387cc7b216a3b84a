-- log_append: make several appends to groups' logs of one queue (see
-- log_lib.lua), in order: each appends its entries to its group's log,
-- each with the group's next sequence, unless its source appended them
-- already. One call carries many appends because a call's fixed cost (the
-- script's start, TIME) was most of an append's.
--
-- A source is a writer whose entries come in numbered batches, version 1,
-- 2, ... per source (e.g. an outbox's rows): a batch is appended once, and
-- only after the batch before it, so a redelivered batch never takes a
-- second sequence and the log keeps the source's order. The hash
-- emq:{q}:logsrc holds each source's last version appended. An append
-- refused (a gap, a bad version) writes nothing and leaves the others be.
--
-- KEYS[1] emq:{q}:logseq       hash   group -> last sequence
-- KEYS[2] emq:{q}:logsrc       hash   source -> last version appended
-- KEYS[3] emq:{q}:logchanges   stream every append, announced: one entry
--                              per group per call, with its last sequence
--                              (log_lib.lua)
-- KEYS[3 + i] emq:{q}:log:<group>  stream the i-th append's group's log
--
-- ARGV, per append in turn (the i-th uses KEYS[3 + i]):
--   group
--   source; '' for none: the entries are appended whatever came before
--   the batch's version within its source (ignored without a source)
--   '1' to append even past a gap in the source's versions (the caller
--     found the versions missing gone for good); else '0'
--   n, the count of entries, then id, type, data for each of them, in order
--
-- Reply: four integers per append, in order: {sequence of the first entry
--        appended (0: none), entries appended, the source's last version
--        appended after the append, refused}, refused being
--   0  made, or a duplicate (the version is held: nothing appended)
--   1  a gap: the source's versions up to the batch's - 1 are not all
--      appended (the third integer is the last that is); nothing written
--   2  the version is not a positive integer; nothing written
--   3  the server failed the append (a damaged key: WRONGTYPE, say) after
--      others of the call were made; nothing of it is kept but maybe its
--      sequences; the messages of these failures follow the integers,
--      in order
--   error "EMQARG ..."  the arguments do not parse; nothing written
--   any other error  the first append to write failed (the server refuses
--                    writes: READONLY, OOM; or a damaged key): nothing
--                    of the call made

-- Read every append's place in ARGV first, so a malformed call writes
-- nothing.
local appends, at_arg = {}, 1
while at_arg <= #ARGV do
  local n = tonumber(ARGV[at_arg + 4])
  if not n or n < 1 or at_arg + 4 + 3 * n > #ARGV then
    return redis.error_reply('EMQARG want group, source, version, force, n and n id, type, data triples per append')
  end
  appends[#appends + 1] = {at_arg, n}
  at_arg = at_arg + 5 + 3 * n
end
if #KEYS ~= 3 + #appends then
  return redis.error_reply('EMQARG want a log key per append')
end

-- Sources' versions held, read at once and kept up to date here: a call
-- may carry a source's next versions too.
local held_of, sources = {}, {}
for _, append in ipairs(appends) do
  local source = ARGV[append[1] + 1]
  if source ~= '' and not held_of[source] then
    held_of[source] = true
    sources[#sources + 1] = source
  end
end
local held_at_start = {}
if #sources > 0 then
  local held = redis.call('HMGET', KEYS[2], unpack(sources))
  for i, source in ipairs(sources) do
    held_of[source] = tonumber(held[i] or '0')
    held_at_start[source] = held_of[source]
  end
end

local reply, announced, last_of, failures = {}, {}, {}, {}
-- advanced lists the sources whose version this call raised, once each:
-- one HSET at the end records them all, where one a source cost a call.
local advanced = {}
local at, made
for i, append in ipairs(appends) do
  local a, n = append[1], append[2]
  local group, source, version, force = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 3] == '1'
  local held, refused = 0, 0
  if source ~= '' then
    held = held_of[source]
    if not version or version < 1 or version % 1 ~= 0 then
      refused = 2
    elseif version > held + 1 and not force then
      refused = 1
    end
  end
  if refused > 0 or (source ~= '' and version <= held) then
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3], reply[#reply + 4] = 0, 0, held, refused
  else
    at = at or now()
    -- Redis keeps a script's writes up to an error it raises: a failure
    -- after appends were made must not hide them, unannounced, from the
    -- caller (whose retry would find them held). One before any was made
    -- fails the call as a whole, keeping the server's error (READONLY
    -- tells the client its cluster map is stale).
    local ok, last = pcall(log_append_batch, KEYS[3 + i], KEYS[1], group, ARGV, a + 5, n, at)
    if not ok then
      -- pcall gives redis.call's error as its message (a table with it in
      -- err on some servers); raising it again would prefix ERR.
      local failure = type(last) == 'table' and last.err or tostring(last)
      if not made then return redis.error_reply(failure) end
      failures[#failures + 1] = failure
      reply[#reply + 1], reply[#reply + 2], reply[#reply + 3], reply[#reply + 4] = 0, 0, held, 3
    else
      made = true
      if source ~= '' then
        if held_of[source] == held_at_start[source] then advanced[#advanced + 1] = source end
        held_of[source], held = version, version
      end
      if not last_of[group] then announced[#announced + 1] = group end
      last_of[group] = last
      reply[#reply + 1], reply[#reply + 2], reply[#reply + 3], reply[#reply + 4] = last - n + 1, n, held, 0
    end
  end
end
-- The sources' versions go before the announcements: a reader told of
-- an append finds its source's version held.
if #advanced > 0 then
  local fields = {}
  for _, source in ipairs(advanced) do
    fields[#fields + 1] = source
    fields[#fields + 1] = held_of[source]
  end
  redis.call('HSET', KEYS[2], unpack(fields))
end
-- One announcement per group, its last sequence: its readers read the log
-- after their position, so that tells them all they need.
for _, group in ipairs(announced) do log_announce(KEYS[3], group, last_of[group]) end
for _, failure in ipairs(failures) do reply[#reply + 1] = failure end
return reply
