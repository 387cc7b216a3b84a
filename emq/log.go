package emq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/internal/scriptpipe"
	"github.com/ordergate/ordergate/lua"
)

// A group's log is an ordered, gapless record of what happened to the
// group's jobs, in Redis beside the queue (lua/log_lib.lua): entry n has
// sequence n, and a reader resumes after the last sequence it read. An
// admission appends its entry in the same script that writes the job
// (Job.Log); the queue's users append theirs with AppendLog, once per
// source version. The queue gives the entries no meaning. A log keeps every
// entry until its archiver marks it archived (log_archive.go).

// LogEntry is one entry to append: an id and a type the caller chooses, and
// data, opaque to the queue.
type LogEntry struct {
	ID   string
	Type string
	Data []byte
}

// LogEvent is an entry as the log holds it.
type LogEvent struct {
	// Sequence is the entry's place in its group's log: 1, 2, ... without
	// gaps.
	Sequence int64
	ID       string
	Type     string
	// At is the server's time when the entry was appended.
	At   time.Time
	Data []byte
}

func (q *Queue) logKey(group string) string { return q.key("log:" + group) }
func (q *Queue) logSequencesKey() string    { return q.key("logseq") }
func (q *Queue) logSourcesKey() string      { return q.key("logsrc") }
func (q *Queue) logChangesKey() string      { return q.key("logchanges") }
func (q *Queue) logArchivedKey() string     { return q.key("logarchived") }
func (q *Queue) logDueKey() string          { return q.key("logdue") }
func (q *Queue) logClaimKey(group string) string {
	return q.key("logclaim:" + group)
}

// logAppendScript is Once: a second run of an append without a source
// would append its entries twice.
var logAppendScript = scriptpipe.Once(lua.LogAppend)

// LogAppended is the outcome of AppendLog.
type LogAppended struct {
	// First is the sequence of the first entry appended; 0 when none was
	// (the source's version was appended already).
	First int64
	// Count is how many entries were appended.
	Count int
	// Err is the append's own failure (AppendLogs joins them all in its
	// error too); nil when it was made.
	Err error
}

// LogGapError: AppendLog refused a source's version because the versions
// before it are not all appended; Held is the last one that is.
type LogGapError struct {
	Source string
	Held   int64
}

func (e *LogGapError) Error() string {
	return fmt.Sprintf("emq: log source %s: versions after %d are missing", e.Source, e.Held)
}

// LogSource names the writer of a batch of log entries and the batch's
// version within it: 1, 2, ... A version is appended once, and only after
// the one before it, unless Force says the ones missing are gone for good.
type LogSource struct {
	Name    string
	Version int64
	Force   bool
}

// AppendLog appends entries to group's log, in order, each with the
// group's next sequence, in one step. With a source the batch is appended
// at most once, after the source's batch before it: a duplicate appends
// nothing, and a version past a gap is refused with *LogGapError, so the
// caller appends the versions missing first. Without a source (Name "") it
// appends the entries whatever came before.
func (q *Queue) AppendLog(ctx context.Context, group string, source LogSource, entries []LogEntry) (LogAppended, error) {
	appended, err := q.AppendLogs(ctx, []LogAppend{{Group: group, Source: source, Entries: entries}})
	if err != nil {
		return LogAppended{}, err
	}
	return appended[0], nil
}

// LogAppend is one AppendLog of an AppendLogs.
type LogAppend struct {
	Group   string
	Source  LogSource
	Entries []LogEntry
}

// AppendLogs runs several appends, each as AppendLog, in one round trip,
// and answers each. The error joins the appends' errors; an append that
// failed answers zero, the others their outcome. A client that waits for
// replicas (WithAdmitReplicas) waits for them here too, and answers
// *NotReplicatedError for an append they did not all hold in time: it was
// made on the primary, and its retry, a duplicate of the source's version,
// waits again.
//
// The appends go a batch to a script call (lua/log_append.lua), in order:
// a call's start cost Redis more than an append's work.
func (q *Queue) AppendLogs(ctx context.Context, appends []LogAppend) ([]LogAppended, error) {
	appended, err := AppendLogsAcross(ctx, []*Queue{q}, [][]LogAppend{appends})
	if appended == nil {
		return nil, err
	}
	return appended[0], err
}

// AppendLogsAcross runs appends[i] on queues[i]'s logs, each as AppendLogs
// does, all in one round trip (a pipeline; on a cluster, one a node), and
// answers them as appends is laid out. The queues are of one client. Each
// call still touches one queue's slot; what is shared is the round trip,
// which the accounts' logs, spread over shards (placement.EventLogs),
// used to pay once a shard. A failed round trip fails every append:
// nil and the error.
func AppendLogsAcross(ctx context.Context, queues []*Queue, appends [][]LogAppend) ([][]LogAppended, error) {
	if len(queues) != len(appends) {
		return nil, fmt.Errorf("emq: append to logs: %d queues for %d lists of appends", len(queues), len(appends))
	}
	var calls []scriptpipe.Call
	type batchOf struct {
		queue int
		batch []LogAppend
	}
	var batches []batchOf
	names := make([]string, len(queues))
	for i, q := range queues {
		if q.client != queues[0].client {
			return nil, fmt.Errorf("emq: append to logs: queue %s is another client's", q.name)
		}
		names[i] = q.name
		for _, append_ := range appends[i] {
			if append_.Group == "" || len(append_.Entries) == 0 {
				return nil, fmt.Errorf("emq: append to log of %q: no group or no entries", append_.Group)
			}
		}
		for _, batch := range logAppendBatches(appends[i]) {
			calls = append(calls, q.logAppendCall(batch))
			batches = append(batches, batchOf{queue: i, batch: batch})
		}
	}
	appended := make([][]LogAppended, len(queues))
	for i := range appended {
		appended[i] = make([]LogAppended, 0, len(appends[i]))
	}
	if len(calls) == 0 {
		return appended, nil
	}
	client := queues[0].client
	cmds, acked, err := runReplicated(ctx, client.rdb, client.reload, logAppendScript, calls, client.admitReplicas, client.admitReplicaTimeout)
	if err != nil {
		return nil, fmt.Errorf("emq: append to logs on %s: %w", strings.Join(names, ", "), err)
	}
	var errs []error
	for i, b := range batches {
		for _, answer := range queues[b.queue].logAppended(b.batch, cmds[i]) {
			if answer.Err == nil && acked[i] < client.admitReplicas {
				answer.Err = &NotReplicatedError{Acked: acked[i], Wanted: client.admitReplicas}
			}
			if answer.Err != nil {
				errs = append(errs, answer.Err)
			}
			appended[b.queue] = append(appended[b.queue], answer)
		}
	}
	return appended, errors.Join(errs...)
}

// A script call blocks Redis while it runs, so a batch is bounded: up to
// logBatchAppends appends and, past its first append, logBatchEntries
// entries. An append costs Redis a few µs and an entry one XADD (about
// 5 µs), so a full batch holds Redis for 1 to 1.5 ms (measured: 64
// appends of 4 entries of 300 bytes), below a bounded cancel run's 2.5 to
// 4.3 ms (docs/protocol.md). A single append larger than the bound still
// goes in one call: its source's version is appended whole or not at all.
const (
	logBatchAppends = 64
	logBatchEntries = 256
)

// logAppendBatches cuts appends, in order, into batches of one call each.
func logAppendBatches(appends []LogAppend) [][]LogAppend {
	var batches [][]LogAppend
	from, entries := 0, 0
	for i, append_ := range appends {
		if i > from && (i-from == logBatchAppends || entries+len(append_.Entries) > logBatchEntries) {
			batches = append(batches, appends[from:i:i])
			from, entries = i, 0
		}
		entries += len(append_.Entries)
	}
	if from < len(appends) {
		batches = append(batches, appends[from:])
	}
	return batches
}

// logAppendCall is the log_append call of a batch of appends.
func (q *Queue) logAppendCall(batch []LogAppend) scriptpipe.Call {
	keys := make([]string, 3, 3+len(batch))
	keys[0], keys[1], keys[2] = q.logSequencesKey(), q.logSourcesKey(), q.logChangesKey()
	size := 0
	for _, append_ := range batch {
		keys = append(keys, q.logKey(append_.Group))
		size += 5 + 3*len(append_.Entries)
	}
	args := make([]any, 0, size)
	for _, append_ := range batch {
		force := "0"
		if append_.Source.Force {
			force = "1"
		}
		args = append(args, append_.Group, append_.Source.Name, append_.Source.Version, force, len(append_.Entries))
		for _, entry := range append_.Entries {
			args = append(args, entry.ID, entry.Type, entry.Data)
		}
	}
	return scriptpipe.Call{Keys: keys, Args: args}
}

// logAppended reads the reply of one log_append call: an answer per
// append of its batch, each with its own Err.
func (q *Queue) logAppended(batch []LogAppend, cmd *redis.Cmd) []LogAppended {
	answers := make([]LogAppended, len(batch))
	reply, failures, err := logAppendReply(cmd, len(batch))
	if err != nil {
		err = fmt.Errorf("emq: append to %d logs on %s: %w", len(batch), q.name, scriptError(err))
		for i := range answers {
			answers[i].Err = err
		}
		return answers
	}
	for i, append_ := range batch {
		first, count, held, refused := reply[4*i], reply[4*i+1], reply[4*i+2], reply[4*i+3]
		switch refused {
		case 0:
			answers[i] = LogAppended{First: first, Count: int(count)}
		case 1:
			answers[i].Err = &LogGapError{Source: append_.Source.Name, Held: held}
		case 3:
			answers[i].Err = fmt.Errorf("emq: append to log of %s on %s: %s", append_.Group, q.name, failures[0])
			failures = failures[1:]
		default:
			answers[i].Err = fmt.Errorf("emq: append to log of %s on %s: version %d of source %s is not a positive integer",
				append_.Group, q.name, append_.Source.Version, append_.Source.Name)
		}
	}
	return answers
}

// logAppendReply splits a log_append reply of n appends into its four
// integers per append and the messages of the appends the server failed
// (refused 3), one each, in order.
func logAppendReply(cmd *redis.Cmd, n int) ([]int64, []string, error) {
	values, err := cmd.Slice()
	if err != nil {
		return nil, nil, err
	}
	if len(values) < 4*n {
		return nil, nil, fmt.Errorf("unexpected reply %v", values)
	}
	reply := make([]int64, 4*n)
	var failed int
	for i := range reply {
		number, ok := values[i].(int64)
		if !ok {
			return nil, nil, fmt.Errorf("unexpected reply %v", values)
		}
		reply[i] = number
		if i%4 == 3 && number == 3 {
			failed++
		}
	}
	failures := make([]string, 0, len(values)-4*n)
	for _, value := range values[4*n:] {
		message, ok := value.(string)
		if !ok {
			return nil, nil, fmt.Errorf("unexpected reply %v", values)
		}
		failures = append(failures, message)
	}
	if len(failures) != failed {
		return nil, nil, fmt.Errorf("unexpected reply %v", values)
	}
	return reply, failures, nil
}

// LogBounds reports the first sequence group's log still holds and the
// last one it was given (0, 0 for a log never written; first > last when
// every entry was dropped).
func (q *Queue) LogBounds(ctx context.Context, group string) (first, last int64, err error) {
	pipe := q.client.rdb.Pipeline()
	oldest := pipe.XRangeN(ctx, q.logKey(group), "-", "+", 1)
	newest := pipe.HGet(ctx, q.logSequencesKey(), group)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("emq: bounds of log %s on %s: %w", group, q.name, err)
	}
	last, _ = strconv.ParseInt(newest.Val(), 10, 64)
	if entries := oldest.Val(); len(entries) > 0 {
		first = sequenceOf(entries[0].ID)
	} else {
		first = last + 1
	}
	return first, last, nil
}

// LastLogSequences reports, by group, the last sequence each group's log
// was given (0 for a log never written), in one round trip.
func (q *Queue) LastLogSequences(ctx context.Context, groups []string) (map[string]int64, error) {
	if len(groups) == 0 {
		return map[string]int64{}, nil
	}
	values, err := q.client.rdb.HMGet(ctx, q.logSequencesKey(), groups...).Result()
	if err != nil {
		return nil, fmt.Errorf("emq: last sequences of %d logs on %s: %w", len(groups), q.name, err)
	}
	lasts := make(map[string]int64, len(groups))
	for i, group := range groups {
		text, _ := values[i].(string)
		lasts[group], _ = strconv.ParseInt(text, 10, 64)
	}
	return lasts, nil
}

// ReadLog returns up to count entries of group's log after sequence after,
// oldest first.
func (q *Queue) ReadLog(ctx context.Context, group string, after, count int64) ([]LogEvent, error) {
	messages, err := q.client.rdb.XRangeN(ctx, q.logKey(group), strconv.FormatInt(after+1, 10)+"-0", "+", count).Result()
	if err != nil {
		return nil, fmt.Errorf("emq: read log %s on %s: %w", group, q.name, err)
	}
	return logEventsOf(messages), nil
}

// ReadLogs returns, by group, up to count entries of each group's log
// after the sequence given for it, in one round trip without waiting;
// groups whose logs hold nothing after it are left out.
func (q *Queue) ReadLogs(ctx context.Context, after map[string]int64, count int64) (map[string][]LogEvent, error) {
	if len(after) == 0 {
		return map[string][]LogEvent{}, nil
	}
	streams, groups := logStreams(q, after)
	// Block -1: no BLOCK argument, so XREAD answers at once.
	read, err := q.client.rdb.XRead(ctx, &redis.XReadArgs{Streams: streams, Count: count, Block: -1}).Result()
	if errors.Is(err, redis.Nil) {
		return map[string][]LogEvent{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("emq: read %d logs on %s: %w", len(after), q.name, err)
	}
	return logReads(read, groups), nil
}

// ReadLogsAndChanges is ReadLogs together with a look, without waiting,
// at the appends announced after position on the change stream (up to
// changes of them, and the position after the last): one round trip for a
// reader that follows many logs to read those that changed and learn of
// the next changes, where a read and then a wait would take two while
// appends keep coming.
func (q *Queue) ReadLogsAndChanges(ctx context.Context, after map[string]int64, count int64, position string, changes int64) (map[string][]LogEvent, []LogChange, string, error) {
	if len(after) == 0 {
		return map[string][]LogEvent{}, nil, position, nil
	}
	streams, groups := logStreams(q, after)
	pipe := q.client.rdb.Pipeline()
	logs := pipe.XRead(ctx, &redis.XReadArgs{Streams: streams, Count: count, Block: -1})
	announced := pipe.XRead(ctx, &redis.XReadArgs{Streams: []string{q.logChangesKey(), position}, Count: changes, Block: -1})
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, position, fmt.Errorf("emq: read %d logs and their changes on %s: %w", len(after), q.name, err)
	}
	read, err := logs.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, position, fmt.Errorf("emq: read %d logs on %s: %w", len(after), q.name, err)
	}
	next, err := announced.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, position, fmt.Errorf("emq: read log changes on %s: %w", q.name, err)
	}
	found, position := logChangesOf(next, position)
	return logReads(read, groups), found, position, nil
}

// logStreams is XREAD's streams argument for reading each group's log
// after the sequence given, and the groups by their log's key.
func logStreams(q *Queue, after map[string]int64) (streams []string, groups map[string]string) {
	streams = make([]string, len(after), 2*len(after))
	groups = make(map[string]string, len(after))
	i := 0
	for group, sequence := range after {
		key := q.logKey(group)
		streams[i] = key
		streams = append(streams, strconv.FormatInt(sequence, 10)+"-0")
		groups[key] = group
		i++
	}
	return streams, groups
}

// logReads is an XREAD of logs by group.
func logReads(read []redis.XStream, groups map[string]string) map[string][]LogEvent {
	events := make(map[string][]LogEvent, len(read))
	for _, stream := range read {
		events[groups[stream.Stream]] = logEventsOf(stream.Messages)
	}
	return events
}

// logChangesOf is an XREAD of the change stream as changes, and the
// position after the last (position when there is none).
func logChangesOf(read []redis.XStream, position string) ([]LogChange, string) {
	var changes []LogChange
	for _, stream := range read {
		for _, message := range stream.Messages {
			change := LogChange{}
			change.Group, _ = message.Values["g"].(string)
			text, _ := message.Values["s"].(string)
			change.Sequence, _ = strconv.ParseInt(text, 10, 64)
			changes = append(changes, change)
			position = message.ID
		}
	}
	return changes, position
}

// LogChange announces an append: group's log was given sequence Sequence
// (a call's entries to a group's log, in one append or several, announce
// their last alone).
type LogChange struct {
	Group    string
	Sequence int64
}

// Every append to any of the queue's logs is announced on one change
// stream (lua/log_lib.lua), so a reader that follows many logs waits on
// that stream alone and reads only the logs that changed. The stream keeps
// about the newest 100,000 announcements: a reader further behind misses
// some, and must compare its positions with LastLogSequences now and then.

// LogChangesPosition returns the change stream's current end, from which
// WaitLogChanges reports the appends that follow.
func (q *Queue) LogChangesPosition(ctx context.Context) (string, error) {
	newest, err := q.client.rdb.XRevRangeN(ctx, q.logChangesKey(), "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("emq: end of the log changes on %s: %w", q.name, err)
	}
	if len(newest) == 0 {
		return "0-0", nil
	}
	return newest[0].ID, nil
}

// WaitLogChanges waits up to block for appends announced after position
// and returns up to count of them, oldest first, with the position after
// the last; none, and position, when block passed first.
func (q *Queue) WaitLogChanges(ctx context.Context, position string, block time.Duration, count int64) ([]LogChange, string, error) {
	read, err := q.client.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{q.logChangesKey(), position}, Count: count, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, position, nil
	}
	if err != nil {
		return nil, position, fmt.Errorf("emq: wait for log changes on %s: %w", q.name, err)
	}
	changes, position := logChangesOf(read, position)
	return changes, position, nil
}

func logEventsOf(messages []redis.XMessage) []LogEvent {
	events := make([]LogEvent, 0, len(messages))
	for _, message := range messages {
		event := LogEvent{Sequence: sequenceOf(message.ID)}
		event.ID, _ = message.Values["id"].(string)
		event.Type, _ = message.Values["type"].(string)
		data, _ := message.Values["data"].(string)
		event.Data = []byte(data)
		if at, ok := message.Values["at"].(string); ok {
			ms, _ := strconv.ParseInt(at, 10, 64)
			event.At = time.UnixMilli(ms)
		}
		events = append(events, event)
	}
	return events
}

// sequenceOf reads the sequence of a log entry's stream ID, "<sequence>-0".
func sequenceOf(id string) int64 {
	sequence, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(sequence, 10, 64)
	return n
}
