package emq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/internal/scriptpipe"
)

// Job states, as JobInfo names them.
const (
	StatePending  = "pending"
	StateActive   = "active"
	StateDelayed  = "delayed"
	StateDone     = "done"
	StateDead     = "dead"
	StateCanceled = "canceled"
)

// DefaultRetention is how many finished (done or canceled) jobs a queue keeps.
const DefaultRetention = 10000

// Queue is one named queue. All its keys share the hash tag {name}, so they
// live in one Redis Cluster slot and a script may touch any of them.
type Queue struct {
	client    *Client
	name      string
	prefix    string
	retention int
	// declaredRetention is the dedup retention Declare sets; zero sets none.
	declaredRetention time.Duration
	// dedup is the queue's dedup settings as this client last read them.
	dedup *dedupSettingsCell
	// heads are the groups at the head of the rotation as the last claim
	// left it: the lanes the next claim names.
	heads atomic.Pointer[[]string]
	// admitKeys are the keys every admission names, spelled once, and
	// admitKeyArgs the same boxed as command arguments once (the lane's,
	// third, is the job's own); windows the dedup windows the last
	// admission named (admitWindows).
	admitKeysOnce sync.Once
	admitKeys     [9]string
	admitKeyArgs  [9]any
	// logKeys are the log's fixed keys an admission with an entry names.
	logKeys [2]string
	windows atomic.Pointer[heldWindows]
}

// QueueOption configures a Queue.
type QueueOption func(*Queue)

// WithRetention bounds how many finished jobs the queue keeps (their records
// and their done index); older ones are dropped as new ones finish.
func WithRetention(jobs int) QueueOption {
	return func(q *Queue) {
		if jobs > 0 {
			q.retention = jobs
		}
	}
}

// Queue returns the queue called name. The name may not hold braces, which
// would change the hash tag.
func (c *Client) Queue(name string, opts ...QueueOption) *Queue {
	if name == "" || strings.ContainsAny(name, "{}") {
		panic(fmt.Sprintf("emq: invalid queue name %q", name))
	}
	q := &Queue{client: c, name: name, prefix: keyPrefix(name), retention: DefaultRetention, dedup: c.dedupCell(name)}
	for _, opt := range opts {
		opt(q)
	}
	return q
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// key is the full key of one of the queue's structures, e.g. "active": the
// one place a key is spelled, so every key carries the queue's hash tag.
// Callers outside emq ask the queue what they need to know instead.
func (q *Queue) key(suffix string) string { return q.prefix + suffix }

// namedKey is key(kind + name) in one concatenation: a group's lane and a
// bucket are spelled on every admission.
func (q *Queue) namedKey(kind, name string) string { return q.prefix + kind + name }

func (q *Queue) jobsKey() string             { return JobsKey(q.name) }
func (q *Queue) laneKey(group string) string { return q.namedKey("lane:", group) }
func (q *Queue) kindsKey() string            { return q.key("kinds") }
func (q *Queue) frontKey() string            { return q.key("front") }
func (q *Queue) rotationKey() string         { return q.key("rotation") }
func (q *Queue) lanesKey() string            { return q.key("lanes") }
func (q *Queue) tagsKey() string             { return q.key("tags") }
func (q *Queue) clockKey() string            { return q.key("clock") }
func (q *Queue) activeKey() string           { return q.key("active") }
func (q *Queue) delayedKey() string          { return q.key("delayed") }
func (q *Queue) deadKey() string             { return q.key("dead") }
func (q *Queue) doneKey() string             { return q.key("done") }
func (q *Queue) canceledKey() string         { return q.key("canceled") }
func (q *Queue) finishedKey() string         { return FinishedKey(q.name) }
func (q *Queue) wakeKey() string             { return q.key("wake") }

// Declare registers the job kinds the queue accepts; admission refuses others
// with ErrKind. Declaring is additive and safe to repeat from every process.
// With WithDedupRetention it also sets the queue's dedup retention, in the
// same step: the last declaration naming one wins (see WithDedupRetention),
// and one that changes it is logged.
func (q *Queue) Declare(ctx context.Context, kinds ...string) error {
	if len(kinds) == 0 {
		return errors.New("emq: declare needs at least one kind")
	}
	skew := q.client.skew()
	args := make([]any, 0, 5+len(kinds))
	if retention := q.declaredRetention; retention > 0 {
		args = append(args, retention.Milliseconds(), dedupWindowFor(retention, skew).Milliseconds())
	} else {
		args = append(args, "", "")
	}
	args = append(args, defaultDedup.retention, defaultDedup.window, skew.Milliseconds())
	for _, kind := range kinds {
		args = append(args, kind)
	}
	reply, err := declareScript.Run(ctx, q.client.rdb, []string{q.kindsKey(), q.dedupKey()}, args...).StringSlice()
	if err == nil && len(reply) != 2 {
		err = fmt.Errorf("unexpected reply %v", reply)
	}
	if err != nil {
		return fmt.Errorf("emq: declare kinds on %s: %w", q.name, err)
	}
	if err := q.learnDedup(reply[0]); err != nil {
		return err
	}
	if before, err := parseDedupSettings(reply[1]); err == nil && reply[1] != "" && before.current != q.dedupSettings().current {
		q.client.logger.Warn("emq: this declaration changed the queue's dedup retention; keys admitted before are still refused for the old one",
			"queue", q.name, "from", before.retention(), "to", q.dedupSettings().retention())
	}
	// The registry lets inspection find every queue; it lives outside the
	// queue's slot, so it is a plain command, not part of a move.
	if err := q.client.rdb.SAdd(ctx, queuesKey, q.name).Err(); err != nil {
		return fmt.Errorf("emq: register queue %s: %w", q.name, err)
	}
	return nil
}

// DedupRetention reads the queue's dedup retention as stored: how long a
// dedup key refuses a second job at least.
func (q *Queue) DedupRetention(ctx context.Context) (time.Duration, error) {
	text, err := q.client.rdb.Get(ctx, q.dedupKey()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("emq: dedup retention of %s: %w", q.name, err)
	}
	settings, err := parseDedupSettings(text)
	if err != nil {
		return 0, fmt.Errorf("%w on %s", err, q.name)
	}
	return settings.retention(), nil
}

// Job is a job to admit.
type Job struct {
	// ID names the job; the caller mints it. No spaces or braces.
	ID string
	// Kind must be one the queue declared.
	Kind string
	// Group is the job's fair lane: groups are served in rotation.
	Group string
	// Payload is opaque to the queue; only CancelGroup, when asked to,
	// reads it as a JSON object to match one member.
	Payload []byte
	// DedupKey refuses a second job under the same key for the queue's
	// dedup retention (WithDedupRetention); empty means the job id itself.
	DedupKey string
	// Fingerprint identifies the request behind the job; a duplicate gets the
	// first job's fingerprint back so the caller can tell a replay from a
	// conflicting reuse of the key.
	Fingerprint string
	// RateLimit, when set, makes the admission first take a permit from the
	// queue's named bucket, in the same script run: an empty bucket refuses
	// the job with a *RateLimitedError and writes nothing else. A duplicate
	// spends its permit too.
	RateLimit *RateLimit
	// Log, when set, is appended to the group's log (log.go) in the same
	// script run, if the job is admitted: a duplicate or a refusal appends
	// nothing.
	Log *LogEntry
}

// Admission is the outcome of Admit.
type Admission struct {
	// ID of the job now on the queue: the new one, or the first one on a duplicate.
	ID string
	// Fingerprint stored with the dedup key.
	Fingerprint string
	// Duplicate is true when the dedup key was taken and nothing was written.
	Duplicate bool
	// Token is what the job's RateLimit took; nil when it had none.
	Take *Take
	// LogSequence is the sequence of the job's Log entry in its group's
	// log; 0 when it had none or nothing was admitted.
	LogSequence int64
}

// Admit runs the admit script: kind check, duplicate refusal, row write and
// pending insert, as one atomic step. Retrying an Admit is safe: the dedup key
// turns the retry into a Duplicate answer. An admission computed from dedup
// settings the queue no longer holds writes nothing and goes again with the
// ones it holds, which the refusal names.
func (q *Queue) Admit(ctx context.Context, job Job) (Admission, error) {
	return q.admitAt(ctx, job, time.Now)
}

// admitAt is Admit with the windows cut by clock.
func (q *Queue) admitAt(ctx context.Context, job Job, clock func() time.Time) (Admission, error) {
	for round := 1; ; round++ {
		call, err := q.admitCall(job, clock())
		if err != nil {
			return Admission{}, err
		}
		cmd, acked := q.client.admits.runCall(ctx, call)
		admission, err := q.admission(job, cmd)
		if round < dedupRounds && q.learnedDedup(err) {
			continue
		}
		if admission.ID != "" {
			q.client.pending.signal(q.name, job.Group)
		}
		if err == nil && acked < q.client.admitReplicas {
			return admission, &NotReplicatedError{Acked: acked, Wanted: q.client.admitReplicas}
		}
		return admission, err
	}
}

// admitCall is the admit script's call for job, with the dedup windows of
// now by this process's clock under the queue's dedup settings as this
// client last read them.
func (q *Queue) admitCall(job Job, now time.Time) (scriptpipe.Call, error) {
	if err := validJob(job); err != nil {
		return scriptpipe.Call{}, err
	}
	dedup := job.DedupKey
	if dedup == "" {
		dedup = job.ID
	}
	settings := q.dedupSettings()
	window, others, expireAt := q.admitWindows(settings, now, q.client.skew())
	q.admitKeysOnce.Do(func() {
		q.admitKeys = [9]string{q.kindsKey(), q.jobsKey(), "", q.rotationKey(), q.lanesKey(), q.tagsKey(), q.clockKey(), q.dedupKey(), q.wakeKey()}
		for i, key := range q.admitKeys {
			q.admitKeyArgs[i] = key
		}
		q.logKeys = [2]string{q.logSequencesKey(), q.logChangesKey()}
	})
	// The call's own values live in one admitValues, boxed as pointers
	// into it: boxing a string or a slice by value allocates once a value.
	v := &admitValues{id: job.ID, kind: job.Kind, group: job.Group, payload: job.Payload, fingerprint: job.Fingerprint,
		digest: dedupDigest(dedup), expireAt: expireAt, settings: settings.text}
	keys := append(v.keys[:0], q.admitKeys[:]...)
	keys[2] = q.laneKey(job.Group)
	keys = append(keys, window)
	keys = append(keys, others...)
	args := append(v.args[:0], &v.id, &v.kind, &v.group, &v.payload, &v.fingerprint, &v.digest, &v.expireAt, &v.settings)
	if limit := job.RateLimit; limit != nil {
		keys = append(keys, q.BucketKey(limit.Bucket))
		v.capacity, v.perSecond = limit.Limit.Capacity, limit.Limit.PerSecond
		args = append(args, &v.capacity, &v.perSecond)
	} else if job.Log != nil {
		args = append(args, "", "")
	}
	if entry := job.Log; entry != nil {
		keys = append(keys, q.logKey(job.Group), q.logKeys[0], q.logKeys[1])
		v.logID, v.logType, v.logData = entry.ID, entry.Type, entry.Data
		args = append(args, &v.logID, &v.logType, &v.logData)
	}
	// The keys boxed as arguments (scriptpipe.Call.KeyArgs): the fixed ones
	// were boxed once, the rest point into keys.
	keyArgs := append(v.keyArgs[:0], q.admitKeyArgs[:]...)
	keyArgs[2] = &keys[2]
	for i := len(keyArgs); i < len(keys); i++ {
		keyArgs = append(keyArgs, &keys[i])
	}
	return scriptpipe.Call{Keys: keys, Args: args, KeyArgs: keyArgs}, nil
}

// admitValues are one admission's keys and arguments. The arrays hold an
// admission with up to two earlier dedup windows; one naming more grows
// its slices out of them.
type admitValues struct {
	keys                                           [17]string
	keyArgs                                        [17]any
	args                                           [13]any
	id, kind, group, fingerprint, digest, settings string
	logID, logType                                 string
	payload, logData                               bytesArg
	expireAt                                       int64
	capacity, perSecond                            int
}

// bytesArg is a []byte that go-redis writes through a pointer to it
// (encoding.BinaryMarshaler): a *bytesArg boxes without an allocation.
type bytesArg []byte

// MarshalBinary is the bytes as they are.
func (b *bytesArg) MarshalBinary() ([]byte, error) { return *b, nil }

// admission reads the admit script's reply to job.
func (q *Queue) admission(job Job, cmd *redis.Cmd) (Admission, error) {
	reply, err := cmd.Slice()
	if err != nil {
		return Admission{}, fmt.Errorf("emq: admit %s on %s: %w", job.ID, q.name, scriptError(err))
	}
	want, takeAt := 3, 3
	if job.Log != nil {
		want, takeAt = 4, 4
	}
	if job.RateLimit != nil {
		want += 4
	}
	var text [3]string
	for i := range min(3, len(reply)) {
		text[i], _ = reply[i].(string)
	}
	outcome := text[0]
	if len(reply) != want || (outcome != "admitted" && outcome != "duplicate" && outcome != "limited") {
		return Admission{}, fmt.Errorf("emq: admit %s on %s: unexpected reply %v", job.ID, q.name, reply)
	}
	admission := Admission{ID: text[1], Fingerprint: text[2], Duplicate: outcome == "duplicate"}
	if job.Log != nil {
		admission.LogSequence, _ = reply[3].(int64)
	}
	if job.RateLimit != nil {
		take, err := takeOf(reply[takeAt:])
		if err != nil {
			return Admission{}, fmt.Errorf("emq: admit %s on %s: %w", job.ID, q.name, err)
		}
		if outcome == "limited" {
			return Admission{}, &RateLimitedError{Bucket: job.RateLimit.Bucket, Take: take}
		}
		admission.Take = &take
	}
	return admission, nil
}

func validJob(job Job) error {
	switch {
	case job.ID == "" || strings.ContainsAny(job.ID, " {}"):
		return fmt.Errorf("emq: invalid job id %q", job.ID)
	case job.Kind == "":
		return fmt.Errorf("emq: job %s has no kind", job.ID)
	case job.Group == "":
		return fmt.Errorf("emq: job %s has no group", job.ID)
	case strings.Contains(job.Fingerprint, " "):
		return fmt.Errorf("emq: job %s: fingerprint may not hold spaces", job.ID)
	case job.RateLimit != nil:
		if err := validRateLimit(*job.RateLimit); err != nil {
			return fmt.Errorf("emq: job %s: %w", job.ID, err)
		}
	}
	return nil
}

// JobInfo is a job as the queue holds it: its row while it lives, its
// record once finished.
type JobInfo struct {
	ID       string
	State    string
	Kind     string
	Group    string
	Attempts int64
	Payload  []byte
	Created  time.Time
	// Finished is when the job was completed or canceled; zero before.
	Finished time.Time
	// LastError is the error of the last failed attempt, if any.
	LastError string
}

// Job reads one job; ErrNotFound when there is none (a finished job past
// the retention, unless it was canceled and its cancel is not confirmed).
func (q *Queue) Job(ctx context.Context, id string) (JobInfo, error) {
	pipe := q.client.rdb.Pipeline()
	live := pipe.HGet(ctx, q.jobsKey(), id)
	record := pipe.HGet(ctx, q.finishedKey(), id)
	kept := pipe.HGet(ctx, q.canceledKey(), id)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return JobInfo{}, fmt.Errorf("emq: read job %s: %w", id, err)
	}
	// A job moves from jobs to finished and never back, so reading jobs
	// first finds it in one of the two, however the reads and its moves
	// interleave (unless the retention dropped its record). A canceled
	// job's row is also kept until its cancel is confirmed (canceled.go),
	// which outlives the retention.
	row, err := live.Result()
	if errors.Is(err, redis.Nil) {
		row, err = record.Result()
	}
	if errors.Is(err, redis.Nil) {
		row, err = kept.Result()
	}
	if errors.Is(err, redis.Nil) {
		return JobInfo{}, fmt.Errorf("emq: job %s on %s: %w", id, q.name, ErrNotFound)
	}
	if err != nil {
		return JobInfo{}, fmt.Errorf("emq: read job %s: %w", id, err)
	}
	info, err := decodeRow(id, row)
	if err != nil {
		return JobInfo{}, fmt.Errorf("emq: %s: %w", q.name, err)
	}
	return info, nil
}

// LaneDepth is the number of pending jobs in a group's lane.
func (q *Queue) LaneDepth(ctx context.Context, group string) (int64, error) {
	depth, err := q.client.rdb.HGet(ctx, q.lanesKey(), group).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("emq: lane depth of %s on %s: %w", group, q.name, err)
	}
	return depth, nil
}

// Pending is the number of pending jobs across all lanes.
func (q *Queue) Pending(ctx context.Context) (int64, error) {
	depths, err := q.LaneDepths(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, depth := range depths {
		n += depth
	}
	return n, nil
}
