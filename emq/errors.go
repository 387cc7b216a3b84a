package emq

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors. Scripts refuse a move with an error reply whose first word is
// a code; emq turns the code into one of these, so callers test with errors.Is.
var (
	// ErrKind: the queue does not accept the job's kind (EMQKIND).
	ErrKind = errors.New("emq: job kind not accepted by the queue")
	// ErrExists: a job with this id is on the queue already (EMQEXISTS).
	ErrExists = errors.New("emq: job id exists already")
	// ErrStale: the caller's token is not the job's current attempts; its lease
	// was lost to another worker (EMQSTALE).
	ErrStale = errors.New("emq: stale token")
	// ErrNotFound: no job has this id (EMQNOJOB, or an empty read).
	ErrNotFound = errors.New("emq: job not found")
	// ErrState: the job is not in a state that allows the move (EMQSTATE).
	ErrState = errors.New("emq: job state does not allow this move")
	// ErrProtocolVersion: the server speaks another protocol version. The
	// returned error is a *VersionError naming both versions.
	ErrProtocolVersion = errors.New("emq: protocol version mismatch")
)

var scriptCodes = map[string]error{
	"EMQKIND":   ErrKind,
	"EMQEXISTS": ErrExists,
	"EMQSTALE":  ErrStale,
	"EMQNOJOB":  ErrNotFound,
	"EMQSTATE":  ErrState,
	"EMQDEDUP":  errDedupSettings,
}

// ScriptError is a refusal from a queue script: its code word and message.
type ScriptError struct {
	Code    string
	Message string
	// State is the job's state an EMQSTATE refusal names.
	State string
}

func (e *ScriptError) Error() string { return "emq: " + e.Message }

// Unwrap lets errors.Is match the sentinel of the code word.
func (e *ScriptError) Unwrap() error { return scriptCodes[e.Code] }

// VersionError names the protocol version this client speaks and the one the
// server holds.
type VersionError struct {
	Want string
	Got  string
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("emq: server holds protocol version %q at %s, this process speaks %q; refusing to run against a queue of another version", e.Got, versionKey, e.Want)
}

func (e *VersionError) Unwrap() error { return ErrProtocolVersion }

// scriptError turns a script's coded error reply into a *ScriptError and leaves
// every other error (network, timeouts) as it is.
func scriptError(err error) error {
	var redisErr redis.Error
	if err == nil || !errors.As(err, &redisErr) {
		return err
	}
	if refusal := refusalOf(redisErr.Error()); refusal != nil {
		return refusal
	}
	return err
}

// refusalOf reads a script's refusal message, "<CODE> ...", whether it came
// as the script's error or as one entry of a script's reply; nil when the
// message starts with no code word emq knows.
func refusalOf(message string) *ScriptError {
	code, _, _ := strings.Cut(message, " ")
	if _, known := scriptCodes[code]; !known {
		return nil
	}
	refusal := &ScriptError{Code: code, Message: message}
	if code == "EMQSTATE" {
		_, rest, _ := strings.Cut(message, " ")
		refusal.State, _, _ = strings.Cut(rest, " ")
	}
	return refusal
}

// NotReplicatedError: an admission was made on the primary, but fewer
// replicas than WithAdmitReplicas asks acknowledged it in time. A failover
// now may lose it. Admit returns it with the admission.
type NotReplicatedError struct {
	Acked, Wanted int
}

func (e *NotReplicatedError) Error() string {
	return fmt.Sprintf("emq: written, but acknowledged by %d of the %d replicas asked for", e.Acked, e.Wanted)
}
