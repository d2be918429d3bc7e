package enqueue

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/dispatch"
)

// The option types of Keys and Priority, as their Type methods return
// them. asynq numbers its own from 0 up and ignores types it does not
// know; Enqueue takes these out of the options it hands asynq anyway.
const (
	KeysOpt     asynq.OptionType = 1<<16 + iota // Keys
	PriorityOpt                                 // Priority
)

// The bounds of Keys and Priority (dispatch.MinPriority, MaxPriority and
// MaxKeys).
const (
	// MinPriority and MaxPriority bound Priority's p.
	MinPriority = dispatch.MinPriority
	MaxPriority = dispatch.MaxPriority
	// MaxKeys is how many distinct keys one Keys option may name.
	MaxKeys = dispatch.MaxKeys
)

// Keys returns an option that puts the task under each key's quota in its
// queue as well as its tenant's: a key's MaxInFlight caps its tasks
// pending or active in the queue across all tenants, and its Paused holds
// them (admission.RedisQuotas.SetKey, admission.StaticQuotas.Keys, admitq
// key set). A task goes in only when its tenant and every key it carries
// allow it; a task waiting on a full, paused or throttled key holds back no
// task that does not carry that key. A key without a quota limits nothing.
//
// Like asynq's options, Keys may be given to Enqueue, EnqueueBatch or
// asynq.NewTask; the last Keys option wins, the keys of several are not
// merged, and Keys() with no keys takes the task's own keys away. Each key
// is a name like a tenant's (admission.ValidateKey), named once or more,
// at most MaxKeys distinct ones. Enqueue refuses a Keys option that breaks
// these rules, wherever it stands, with an error that matches
// ErrInvalidOption and, for a bad name, admission.ErrInvalidKey; nothing is
// written.
//
// The enqueued task carries its keys in the header KeysHeader, and a
// handler reads them with worker.Keys. Keys hold tasks only in a
// dispatched queue, one that a worker with a gate (worker.Config.Gate)
// serves; elsewhere the task goes in as it would without them, and the
// producer logs that once.
func Keys(keys ...string) asynq.Option { return keysOption(slices.Clone(keys)) }

// Priority returns an option that orders the task among its tenant's
// waiting tasks in a dispatched queue: higher first, first in, first out
// within a priority. It never moves the tenant ahead of another tenant's
// turn, and a task that need not wait goes in at once whatever its
// priority. p is MinPriority to MaxPriority; without the option it is 0.
//
// Like asynq's options, Priority may be given to Enqueue, EnqueueBatch or
// asynq.NewTask, and the last one wins. Enqueue refuses a p out of range,
// wherever the option stands, with an error that matches ErrInvalidOption;
// nothing is written.
func Priority(p int) asynq.Option { return priorityOption(p) }

type keysOption []string

// String returns the option as it would be written, such as
// Keys("api:stripe", "db").
func (o keysOption) String() string {
	var b strings.Builder
	b.WriteString("Keys(")
	for i, k := range o {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(k))
	}
	b.WriteString(")")
	return b.String()
}

// Type returns KeysOpt.
func (o keysOption) Type() asynq.OptionType { return KeysOpt }

// Value returns a copy of the keys, as a []string in the order given.
func (o keysOption) Value() any { return slices.Clone([]string(o)) }

type priorityOption int

// String returns the option as it would be written, such as Priority(10).
func (o priorityOption) String() string { return fmt.Sprintf("Priority(%d)", int(o)) }

// Type returns PriorityOpt.
func (o priorityOption) Type() asynq.OptionType { return PriorityOpt }

// Value returns the priority, an int.
func (o priorityOption) Value() any { return int(o) }

// isOurs reports whether o is an option of this package's, which asynq
// must not be handed.
func isOurs(o asynq.Option) bool {
	if o == nil {
		return false
	}
	t := o.Type()
	return t == KeysOpt || t == PriorityOpt
}

// appendForAsynq appends to dst the options of opts that asynq is to see:
// all but Keys and Priority.
func appendForAsynq(dst, opts []asynq.Option) []asynq.Option {
	for _, o := range opts {
		if !isOurs(o) {
			dst = append(dst, o)
		}
	}
	return dst
}

// optionKeys returns the keys of a Keys option o, sorted and each once,
// or an error for a bad name or too many keys.
func optionKeys(o asynq.Option) ([]string, error) {
	keys, ok := o.Value().([]string)
	if !ok {
		return nil, fmt.Errorf("%w %v: its value is a %T, want a []string", ErrInvalidOption, o, o.Value())
	}
	keys, err := dispatch.SortKeys(keys)
	if err != nil {
		return nil, fmt.Errorf("%w %v: %w", ErrInvalidOption, o, err)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return keys, nil
}

// optionPriority returns the priority of a Priority option o, or an error
// for one out of range.
func optionPriority(o asynq.Option) (int, error) {
	p, ok := o.Value().(int)
	switch {
	case !ok:
		return 0, fmt.Errorf("%w %v: its value is a %T, want an int", ErrInvalidOption, o, o.Value())
	case p < MinPriority || p > MaxPriority:
		return 0, fmt.Errorf("%w %v: a priority is %d to %d", ErrInvalidOption, o, MinPriority, MaxPriority)
	}
	return p, nil
}

// keysHeader is the value of KeysHeader for keys (sorted, each once).
func keysHeader(keys []string) string { return strings.Join(keys, keysSeparator) }

// keysSeparator separates the keys in KeysHeader: a key holds no control
// characters (admission.ValidateKey).
const keysSeparator = "\n"
