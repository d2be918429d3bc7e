package enqueue

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/hibiken/asynq"
)

// errTaskLayout is returned when asynq.Task no longer keeps its options
// where taskOptions reads them. Enqueueing anyway would lose the task's own
// TaskID and ProcessAt, so Enqueue refuses; a test pins the layout.
var errTaskLayout = errors.New("enqueue: cannot read the options of an asynq.Task: unsupported asynq version")

// taskOptsField is asynq.Task's unexported field of options, found once;
// its Index is nil when asynq.Task no longer has one of the expected type.
var taskOptsField = func() reflect.StructField {
	f, ok := reflect.TypeFor[asynq.Task]().FieldByName("opts")
	if !ok || f.Type != reflect.TypeFor[[]asynq.Option]() {
		return reflect.StructField{}
	}
	return f
}()

// taskOptions returns the options t was created with (asynq.NewTask(...,
// opts...)). asynq applies them ahead of the options given to Enqueue but
// keeps them in an unexported field with no accessor, and Enqueue must see
// them: a TaskID or a ProcessAt set on the task counts as much as one passed
// to Enqueue. The slice is only read, never changed.
func taskOptions(t *asynq.Task) ([]asynq.Option, error) {
	if taskOptsField.Index == nil {
		return nil, errTaskLayout
	}
	return *(*[]asynq.Option)(unsafe.Add(unsafe.Pointer(t), taskOptsField.Offset)), nil
}

// scheduling is what Enqueue needs from a task's asynq options.
type scheduling struct {
	// id is the task ID from asynq.TaskID; "" when there is none.
	id string
	// queue is the asynq queue the task goes to, from asynq.Queue;
	// "default" when none is given, as in asynq.
	queue string
	// at is when the caller asked the task to run, from asynq.ProcessAt or
	// asynq.ProcessIn (relative to now); zero when neither was given.
	at time.Time
	// unique is the asynq.Unique TTL; 0 when none.
	unique time.Duration
	// group is the asynq.Group key; "" when none.
	group string
	// deadline is the asynq.Deadline; zero when none.
	deadline time.Time
	// keys are the task's concurrency keys, from Keys: sorted, each once;
	// nil when none.
	keys []string
	// priority is the task's Priority; 0 when none.
	priority int
}

// readScheduling reads lists of options in the order asynq applies them,
// the last option of each kind winning, as in asynq.Client.Enqueue.
func readScheduling(now time.Time, lists ...[]asynq.Option) scheduling {
	s := scheduling{queue: defaultQueue}
	for _, opts := range lists {
		for _, o := range opts {
			if o == nil {
				continue
			}
			switch o.Type() {
			case asynq.TaskIDOpt:
				s.id, _ = o.Value().(string)
			case asynq.QueueOpt:
				s.queue, _ = o.Value().(string)
			case asynq.ProcessAtOpt:
				s.at, _ = o.Value().(time.Time)
			case asynq.ProcessInOpt:
				d, _ := o.Value().(time.Duration)
				s.at = now.Add(d)
			case asynq.UniqueOpt:
				s.unique, _ = o.Value().(time.Duration)
			case asynq.GroupOpt:
				s.group, _ = o.Value().(string)
			case asynq.DeadlineOpt:
				s.deadline, _ = o.Value().(time.Time)
			case KeysOpt:
				s.keys, _ = optionKeys(o) // checkOptions refused bad ones
			case PriorityOpt:
				s.priority, _ = optionPriority(o)
			}
		}
	}
	return s
}

// checkOptions refuses what asynq's option parsing would refuse: a blank
// queue name, task ID or group key, or a Unique TTL under a second. Enqueue
// checks before admission, since asynq's refusal, a plain error like any
// other, could not be told from a failed write after it, and would cost the
// tenant a slot until the window passes. It refuses bad Keys and Priority
// options too, as asynq does its own, wherever they stand. Every error
// matches ErrInvalidOption.
func checkOptions(lists ...[]asynq.Option) error {
	for _, opts := range lists {
		for _, o := range opts {
			if o == nil {
				continue
			}
			switch v := o.Value(); o.Type() {
			case asynq.QueueOpt, asynq.TaskIDOpt, asynq.GroupOpt:
				if s, ok := v.(string); ok && isBlank(s) {
					return fmt.Errorf("%w %v: blank", ErrInvalidOption, o)
				}
			case asynq.UniqueOpt:
				if d, ok := v.(time.Duration); ok && d < time.Second {
					return fmt.Errorf("%w %v: asynq needs a Unique TTL of at least 1s", ErrInvalidOption, o)
				}
			case KeysOpt:
				if _, err := optionKeys(o); err != nil {
					return err
				}
			case PriorityOpt:
				if _, err := optionPriority(o); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// hasTaskID reports whether opts set a task ID.
func hasTaskID(opts []asynq.Option) bool {
	for _, o := range opts {
		if o != nil && o.Type() == asynq.TaskIDOpt {
			return true
		}
	}
	return false
}

// isBlank mirrors asynq's test for an empty task ID or type name.
func isBlank(s string) bool { return strings.TrimSpace(s) == "" }

// ceilSecond rounds t up to a whole second. asynq stores a scheduled task
// under its time truncated to seconds and promotes it once the worker's
// clock reaches that second, so only a whole-second time is never early.
func ceilSecond(t time.Time) time.Time {
	if s := t.Truncate(time.Second); !s.Equal(t) {
		return s.Add(time.Second)
	}
	return t
}
