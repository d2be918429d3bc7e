package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hibiken/asynq"
)

func TestConfigMapsToAsynqConfigWithDefaults(t *testing.T) {
	// Functions and the logger can't be compared; they are checked below.
	ignoreFuncs := cmpopts.IgnoreFields(asynq.Config{}, "IsFailure", "RetryDelayFunc", "ErrorHandler", "Logger")
	discard := slog.New(slog.DiscardHandler)
	// What a Config of zero values gets.
	defaults := asynq.Config{
		Concurrency:              runtime.NumCPU(),
		Queues:                   map[string]int{"default": 1},
		ShutdownTimeout:          8 * time.Second,
		DelayedTaskCheckInterval: time.Second,
		TaskCheckInterval:        time.Second,
		LogLevel:                 asynq.DebugLevel,
	}
	tests := []struct {
		desc             string
		cfg              Config
		want             asynq.Config
		wantErrorHandler bool
	}{
		{
			desc: "zero value gets admitq's defaults",
			cfg:  Config{},
			want: defaults,
		},
		{
			desc: "set values pass through",
			cfg: Config{
				Concurrency:              7,
				Queues:                   map[string]int{"critical": 6, "low": 1, "off": 0},
				StrictPriority:           true,
				ShutdownTimeout:          30 * time.Second,
				DelayedTaskCheckInterval: 250 * time.Millisecond,
				TaskCheckInterval:        100 * time.Millisecond,
				ErrorHandler:             asynq.ErrorHandlerFunc(func(context.Context, *asynq.Task, error) {}),
			},
			want: asynq.Config{
				Concurrency:              7,
				Queues:                   map[string]int{"critical": 6, "low": 1, "off": 0},
				StrictPriority:           true,
				ShutdownTimeout:          30 * time.Second,
				DelayedTaskCheckInterval: 250 * time.Millisecond,
				TaskCheckInterval:        100 * time.Millisecond,
				LogLevel:                 asynq.DebugLevel,
			},
			wantErrorHandler: true,
		},
		{
			desc: "negative values get defaults, not asynq's busy loops",
			cfg: Config{
				Concurrency:              -1,
				ShutdownTimeout:          -time.Second,
				DelayedTaskCheckInterval: -time.Second,
				TaskCheckInterval:        -time.Second,
			},
			want: defaults,
		},
		{
			desc: "queues that all have weight zero or less mean the default queue",
			cfg:  Config{Queues: map[string]int{"off": 0, "neg": -1}},
			want: defaults,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got := tc.cfg.asynqConfig(discard)
			if diff := cmp.Diff(tc.want, got, ignoreFuncs); diff != "" {
				t.Errorf("asynqConfig() mismatch (-want,+got):\n%s", diff)
			}
			// The Worker always installs its own, to handle ThrottledError.
			if got.IsFailure == nil || got.RetryDelayFunc == nil || got.Logger == nil {
				t.Errorf("IsFailure, RetryDelayFunc and Logger must be set; got %v, %v, %v",
					got.IsFailure != nil, got.RetryDelayFunc != nil, got.Logger != nil)
			}
			if (got.ErrorHandler != nil) != tc.wantErrorHandler {
				t.Errorf("ErrorHandler set = %v, want %v", got.ErrorHandler != nil, tc.wantErrorHandler)
			}
		})
	}
}

func TestConfigQueuesAreCopied(t *testing.T) {
	queues := map[string]int{"a": 1}
	got := Config{Queues: queues}.asynqConfig(slog.New(slog.DiscardHandler))
	queues["a"] = 100
	if got.Queues["a"] != 1 {
		t.Errorf("changing Config.Queues after asynqConfig changed the asynq config: weight %d, want 1", got.Queues["a"])
	}
}

func TestNewDefaultsLoggerToSlogDefault(t *testing.T) {
	w := New(asynq.RedisClientOpt{}, Config{})
	if w.log != slog.Default() {
		t.Error("New(Config{}) logger is not slog.Default()")
	}
}

func TestAsynqLoggerMapsLevels(t *testing.T) {
	var buf bytes.Buffer
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	l := newAsynqLogger(slog.New(h))
	var exitCode = -1
	var logBeforeExit string
	l.exit = func(code int) {
		exitCode = code
		logBeforeExit = buf.String()
	}

	l.Debug("polling ", "queues")
	l.Info("Starting processing")
	l.Warn("Retry exhausted for task id=", 42)
	l.Error("Dequeue error: ", errors.New("connection refused"))
	l.Fatal("cannot go on")

	want := strings.Join([]string{
		`level=DEBUG msg="polling queues" component=asynq`,
		`level=INFO msg="Starting processing" component=asynq`,
		`level=WARN msg="Retry exhausted for task id=42" component=asynq`,
		`level=ERROR msg="Dequeue error: connection refused" component=asynq`,
		`level=ERROR+4 msg="cannot go on" component=asynq`,
		``,
	}, "\n")
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("log output mismatch (-want,+got):\n%s", diff)
	}
	if exitCode != 1 {
		t.Errorf("Fatal exited with %d, want 1", exitCode)
	}
	if !strings.Contains(logBeforeExit, "cannot go on") {
		t.Error("Fatal exited before it logged")
	}
}

func TestAsynqLoggerSkipsDisabledLevels(t *testing.T) {
	var buf bytes.Buffer
	l := newAsynqLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	l.Debug("noise")
	l.Info("noise")
	if buf.Len() != 0 {
		t.Errorf("logged below the handler's level: %q", buf.String())
	}
}

// Fair without a Gate is an error from Start, never a silent no-op: the
// queues would not be fair.
func TestFairWithoutGateIsAnError(t *testing.T) {
	w := New(asynq.RedisClientOpt{Addr: "127.0.0.1:1"}, Config{Fair: true})
	err := w.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	if err == nil || !strings.Contains(err.Error(), "Fair needs Config.Gate") {
		t.Fatalf("Start with Fair and no Gate: %v; want an error naming Gate", err)
	}
	w.Shutdown()
}
