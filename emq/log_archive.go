package emq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/internal/scriptpipe"
	"github.com/ordergate/ordergate/lua"
)

// A log keeps every entry until its archiver has copied it elsewhere: the
// archiver reads the entries past the group's archived position, stores
// them, and then marks them archived (MarkLogsArchived), which raises the
// position, only ever upward, and trims the log to its hot tail: the
// entries archived AND older than the tail's Age or beyond its newest
// Count are dropped, oldest first (lua/log_archived.lua). So a log holds
// its hot tail plus whatever its archiver has not copied yet, and a reader
// that finds an entry gone from the log finds it in the archive. The queue
// gives the archive no meaning; placement's archiver keeps accounts'
// events in PostgreSQL.

// LogHotTail is what a log keeps of the entries it has archived: those
// younger than Age and, whatever their age, its newest Count.
type LogHotTail struct {
	Count int
	Age   time.Duration
}

// DefaultLogHotTail keeps 10 minutes of a log, and its newest 1,000
// entries.
var DefaultLogHotTail = LogHotTail{Count: 1_000, Age: 10 * time.Minute}

// logTrimMost bounds the entries one mark drops, so one script never runs
// long; a log with more to drop is due again at once (LogsDue).
const logTrimMost = 10_000

// logArchivedScript is Repeatable: a second run raises nothing more and
// drops what is due by then, as the next mark would.
var logArchivedScript = scriptpipe.Repeatable(lua.LogArchived)

// LogMark says a group's log is archived through sequence Archived; 0
// raises nothing and only trims the log.
type LogMark struct {
	Group    string
	Archived int64
}

// LogMarked is the outcome of one LogMark.
type LogMarked struct {
	// Archived is the group's archived position after the mark: at least
	// the one asked for.
	Archived int64
	// First is the first sequence the log still holds, 0 when it holds
	// none.
	First int64
	// Dropped is how many entries the mark dropped.
	Dropped int64
	// Err is the mark's own failure; MarkLogsArchived joins them all too.
	Err error
}

// MarkLogsArchived raises each group's archived position to the one given
// (never lowers it) and trims its log to hot, in one round trip.
func (q *Queue) MarkLogsArchived(ctx context.Context, marks []LogMark, hot LogHotTail) ([]LogMarked, error) {
	if hot.Count < 0 || hot.Age < 0 {
		return nil, fmt.Errorf("emq: mark logs archived on %s: a negative hot tail %+v", q.name, hot)
	}
	calls := make([]scriptpipe.Call, len(marks))
	for i, mark := range marks {
		if mark.Group == "" {
			return nil, fmt.Errorf("emq: mark logs archived on %s: a mark without a group", q.name)
		}
		calls[i] = scriptpipe.Call{
			Keys: []string{q.logKey(mark.Group), q.logArchivedKey(), q.logDueKey()},
			Args: []any{mark.Group, mark.Archived, hot.Count, hot.Age.Milliseconds(), logTrimMost},
		}
	}
	cmds, err := scriptpipe.Run(ctx, q.client.rdb, logArchivedScript, calls)
	if err != nil {
		return nil, fmt.Errorf("emq: mark logs archived on %s: %w", q.name, err)
	}
	marked := make([]LogMarked, len(marks))
	var errs []error
	for i, cmd := range cmds {
		reply, err := cmd.Int64Slice()
		if err == nil && len(reply) != 3 {
			err = fmt.Errorf("unexpected reply %v", reply)
		}
		if err != nil {
			err = fmt.Errorf("emq: mark log %s archived on %s: %w", marks[i].Group, q.name, scriptError(err))
			marked[i].Err = err
			errs = append(errs, err)
			continue
		}
		marked[i] = LogMarked{Archived: reply[0], First: reply[1], Dropped: reply[2]}
	}
	return marked, errors.Join(errs...)
}

// logClaimScript is Repeatable: a second run renews what the first took.
var logClaimScript = scriptpipe.Repeatable(lua.LogClaim)

// ClaimLogs claims the groups' logs for holder for ttl, renewing those it
// holds already, in one round trip, and returns the groups it holds now
// (the others are another holder's). A claim keeps the archivers that
// share a queue's logs from copying the same entries at once; it is a
// hint, not a fence (lua/log_claim.lua): the archive must still refuse
// what it holds.
func (q *Queue) ClaimLogs(ctx context.Context, groups []string, holder string, ttl time.Duration) ([]string, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("emq: claim logs for %s on %s: a ttl of %s", holder, q.name, ttl)
	}
	return q.claimLogs(ctx, groups, holder, max(ttl.Milliseconds(), 1))
}

// ReleaseLogs releases holder's claims of the groups' logs (ClaimLogs), so
// another holder takes them at once: an archiver whose copy failed lets
// the others try.
func (q *Queue) ReleaseLogs(ctx context.Context, groups []string, holder string) error {
	_, err := q.claimLogs(ctx, groups, holder, 0)
	return err
}

// claimLogs runs lua/log_claim.lua: ttl milliseconds, 0 to release.
func (q *Queue) claimLogs(ctx context.Context, groups []string, holder string, ttl int64) ([]string, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	keys := make([]string, len(groups))
	for i, group := range groups {
		keys[i] = q.logClaimKey(group)
	}
	cmds, err := scriptpipe.Run(ctx, q.client.rdb, logClaimScript, []scriptpipe.Call{{Keys: keys, Args: []any{holder, ttl}}})
	var reply []int64
	if err == nil {
		reply, err = cmds[0].Int64Slice()
	}
	if err == nil && len(reply) != len(groups) {
		err = fmt.Errorf("unexpected reply %v", reply)
	}
	if err != nil {
		return nil, fmt.Errorf("emq: claim %d logs for %s on %s: %w", len(groups), holder, q.name, scriptError(err))
	}
	held := make([]string, 0, len(groups))
	for i, group := range groups {
		if reply[i] == 1 {
			held = append(held, group)
		}
	}
	return held, nil
}

// LogsArchived reports, by group, each group's archived position (0 for a
// log never marked), in one round trip.
func (q *Queue) LogsArchived(ctx context.Context, groups []string) (map[string]int64, error) {
	if len(groups) == 0 {
		return map[string]int64{}, nil
	}
	values, err := q.client.rdb.HMGet(ctx, q.logArchivedKey(), groups...).Result()
	if err != nil {
		return nil, fmt.Errorf("emq: archived positions of %d logs on %s: %w", len(groups), q.name, err)
	}
	return int64sOf(groups, values), nil
}

// LogsDue returns up to count groups whose logs hold archived entries that
// have left their hot tail by this process's clock, so a log that no
// longer grows is trimmed too: mark each (LogMark with Archived 0). A log
// marked before it is due by the server's clock is only scheduled again.
func (q *Queue) LogsDue(ctx context.Context, count int64) ([]string, error) {
	groups, err := q.client.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
		Key: q.logDueKey(), ByScore: true, Start: "-inf", Stop: strconv.FormatInt(time.Now().UnixMilli(), 10), Count: count,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("emq: logs due a trim on %s: %w", q.name, err)
	}
	return groups, nil
}

// LogPage is a page of a log read with the log's last sequence.
type LogPage struct {
	// Events are the entries read, oldest first.
	Events []LogEvent
	// Last is the last sequence the log gave (0 for a log never written).
	Last int64
}

// ReadLogPage returns up to count entries of group's log after sequence
// after, with the last sequence the log gave, in one round trip: a page
// that does not start at after+1 tells a log that dropped entries
// (archived) from one that has none after after yet.
func (q *Queue) ReadLogPage(ctx context.Context, group string, after, count int64) (LogPage, error) {
	pipe := q.client.rdb.Pipeline()
	entries := pipe.XRangeN(ctx, q.logKey(group), strconv.FormatInt(after+1, 10)+"-0", "+", count)
	last := pipe.HGet(ctx, q.logSequencesKey(), group)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return LogPage{}, fmt.Errorf("emq: read log %s on %s: %w", group, q.name, err)
	}
	page := LogPage{Events: logEventsOf(entries.Val())}
	page.Last, _ = strconv.ParseInt(last.Val(), 10, 64)
	return page, nil
}

// LogPosition is where a group's log stands: the last sequence it gave and
// the last one archived.
type LogPosition struct {
	Group          string
	Last, Archived int64
}

// ScanLogPositions returns the positions of about count groups from
// cursor on (0 starts a scan), and the cursor to go on from (0 when the
// scan is done): an archiver compares them to find logs whose appends it
// was not told of. A scan returns every group whose log existed
// throughout it at least once.
func (q *Queue) ScanLogPositions(ctx context.Context, cursor uint64, count int64) ([]LogPosition, uint64, error) {
	fields, next, err := q.client.rdb.HScan(ctx, q.logSequencesKey(), cursor, "", count).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("emq: scan log positions on %s: %w", q.name, err)
	}
	groups := make([]string, 0, len(fields)/2)
	lasts := make(map[string]int64, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		groups = append(groups, fields[i])
		lasts[fields[i]], _ = strconv.ParseInt(fields[i+1], 10, 64)
	}
	archived, err := q.LogsArchived(ctx, groups)
	if err != nil {
		return nil, 0, err
	}
	positions := make([]LogPosition, len(groups))
	for i, group := range groups {
		positions[i] = LogPosition{Group: group, Last: lasts[group], Archived: archived[group]}
	}
	return positions, next, nil
}

// The change stream (WaitLogChanges) can also be shared: the readers of
// one share (a consumer group on the stream) each take a part of the
// announcements, every announcement going to one of them, so several
// archivers split the logs to archive between them. Taking is at most
// once (no pending entries are kept): an announcement taken by a reader
// that stops before acting on it is lost, as are those the stream dropped
// before a reader took them; the readers compare positions now and then
// (ScanLogPositions) for the appends they missed.

// TakeLogChanges waits up to block for appends announced that no reader of
// share has taken, and returns up to count of them, oldest first, taken by
// reader. A share is made at the stream's end when it is first read (or
// the stream was purged): the appends announced before are not returned.
func (q *Queue) TakeLogChanges(ctx context.Context, share, reader string, block time.Duration, count int64) ([]LogChange, error) {
	args := &redis.XReadGroupArgs{Group: share, Consumer: reader, Streams: []string{q.logChangesKey(), ">"}, Count: count, Block: block, NoAck: true}
	read, err := q.client.rdb.XReadGroup(ctx, args).Result()
	if redis.HasErrorPrefix(err, "NOGROUP") {
		err = q.client.rdb.XGroupCreateMkStream(ctx, q.logChangesKey(), share, "$").Err()
		if err == nil || redis.HasErrorPrefix(err, "BUSYGROUP") {
			return nil, nil
		}
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("emq: take log changes for %s of %s on %s: %w", reader, share, q.name, err)
	}
	changes, _ := logChangesOf(read, "")
	return changes, nil
}

// LeaveLogChanges removes reader from share, and with it readers of the
// share that took nothing for longer than idle (their processes are gone):
// a reader takes a few bytes of the stream until it is removed.
func (q *Queue) LeaveLogChanges(ctx context.Context, share, reader string, idle time.Duration) error {
	readers, err := q.client.rdb.XInfoConsumers(ctx, q.logChangesKey(), share).Result()
	if redis.HasErrorPrefix(err, "NOGROUP") || errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("emq: readers of log changes %s on %s: %w", share, q.name, err)
	}
	for _, info := range readers {
		if info.Name != reader && info.Idle < idle {
			continue
		}
		if err := q.client.rdb.XGroupDelConsumer(ctx, q.logChangesKey(), share, info.Name).Err(); err != nil {
			return fmt.Errorf("emq: remove reader %s of log changes %s on %s: %w", info.Name, share, q.name, err)
		}
	}
	return nil
}

// LogMemory is what the queue's logs take on the server, in bytes as
// MEMORY USAGE counts them.
type LogMemory struct {
	// Logs is the groups' logs, Count how many there are.
	Logs  int64
	Count int
	// Index is the hashes and the due set beside them (a field or two per
	// group and per source), Changes the change stream (capped).
	Index, Changes int64
}

// LogMemoryUsage measures the queue's logs, for benchmarks: it scans the
// keyspace, so it is no call for a hot path.
func (q *Queue) LogMemoryUsage(ctx context.Context) (LogMemory, error) {
	logs, err := q.scanKeys(ctx, "log:*")
	if err != nil {
		return LogMemory{}, err
	}
	usage := LogMemory{Count: len(logs)}
	pipe := q.client.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, 0, len(logs)+5)
	for _, key := range logs {
		cmds = append(cmds, pipe.MemoryUsage(ctx, key, 0))
	}
	for _, key := range []string{q.logSequencesKey(), q.logSourcesKey(), q.logArchivedKey(), q.logDueKey(), q.logChangesKey()} {
		cmds = append(cmds, pipe.MemoryUsage(ctx, key, 0))
	}
	changes := len(cmds) - 1
	// Each command's error is read below: a missing key fails only its own.
	_, _ = pipe.Exec(ctx)
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return LogMemory{}, fmt.Errorf("emq: memory usage of the logs of %s: %w", q.name, err)
		}
		switch {
		case i < len(logs):
			usage.Logs += cmd.Val()
		case i == changes:
			usage.Changes = cmd.Val()
		default:
			usage.Index += cmd.Val()
		}
	}
	return usage, nil
}

// int64sOf reads an HMGET's answer for fields as whole numbers, 0 for a
// field missing.
func int64sOf(fields []string, values []any) map[string]int64 {
	numbers := make(map[string]int64, len(fields))
	for i, field := range fields {
		text, _ := values[i].(string)
		numbers[field], _ = strconv.ParseInt(text, 10, 64)
	}
	return numbers
}

// ReadLogsReplicated is ReadLogs for a reader that copies the entries
// elsewhere (an archiver): it answers them only once the replicas the
// client waits for (WithAdmitReplicas) hold them, and *NotReplicatedError
// when fewer did in time, so a copy never keeps an entry a failover would
// lose (and give its sequence to another); a client that waits for none
// reads as ReadLogs. The read, a mark and WAIT go in one pipeline, on one
// connection to one server: a read and a wait apart reach different
// servers when a failover comes between them, or cuts the wait's
// connection (go-redis sends the wait again, to the promoted server),
// and the promoted server's replicas vouched for entries it never held.
// A pipeline cut off is sent again whole, read and wait together.
func (q *Queue) ReadLogsReplicated(ctx context.Context, after map[string]int64, count int64) (map[string][]LogEvent, error) {
	if q.client.admitReplicas <= 0 {
		return q.ReadLogs(ctx, after, count)
	}
	if len(after) == 0 {
		return map[string][]LogEvent{}, nil
	}
	var server redis.Cmdable = q.client.rdb
	if cluster, ok := q.client.rdb.(*redis.ClusterClient); ok {
		// WAIT names no key: a cluster pipeline would send it to any node.
		master, err := cluster.MasterForKey(ctx, q.logChangesKey())
		if err != nil {
			return nil, fmt.Errorf("emq: find the node of %s: %w", q.name, err)
		}
		server = master
	}
	streams, groups := logStreams(q, after)
	pipe := server.Pipeline()
	logs := pipe.XRead(ctx, &redis.XReadArgs{Streams: streams, Count: count, Block: -1})
	// The mark is a write of this connection after the read, so the
	// offset WAIT counts covers every write the read saw. It is a script
	// flagged allow-oom (lua/log_read_mark.lua), which a Redis at
	// maxmemory runs where it refuses a SET: the archiver is what frees
	// it. EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT call
	// by call, and the script is a few bytes.
	mark := pipe.Eval(ctx, lua.LogReadMark, []string{q.key("replicated")}, time.Minute.Milliseconds())
	wait := redis.NewIntCmd(ctx, "wait", q.client.admitReplicas, q.client.admitReplicaTimeout.Milliseconds())
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx) // each command's error is read below
	read, err := logs.Result()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	if err == nil {
		err = errors.Join(mark.Err(), wait.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("emq: read %d logs on %s, replicated: %w", len(after), q.name, err)
	}
	if acked := int(wait.Val()); acked < q.client.admitReplicas {
		return nil, &NotReplicatedError{Acked: acked, Wanted: q.client.admitReplicas}
	}
	return logReads(read, groups), nil
}
