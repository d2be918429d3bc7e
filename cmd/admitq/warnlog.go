package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
)

// warnings returns a logger that writes the library's warnings and
// errors to w as the command writes its own: one line each,
// "admitq: warning: <message> (key=value, ...)", without a time. Records
// below slog.LevelWarn are dropped.
func warnings(w io.Writer) *slog.Logger { return slog.New(lineHandler{w: w}) }

// lineHandler is warnings' slog.Handler.
type lineHandler struct {
	w     io.Writer
	attrs []slog.Attr
}

func (h lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h lineHandler) Handle(_ context.Context, r slog.Record) error {
	kind := "warning"
	if r.Level >= slog.LevelError {
		kind = "error"
	}
	kv := make([]string, 0, len(h.attrs)+r.NumAttrs())
	for _, a := range h.attrs {
		kv = append(kv, a.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		kv = append(kv, a.String())
		return true
	})
	msg := strings.TrimPrefix(r.Message, "admitq: ")
	if len(kv) > 0 {
		msg += " (" + strings.Join(kv, ", ") + ")"
	}
	_, err := fmt.Fprintf(h.w, "admitq: %s: %s\n", kind, msg)
	return err
}

func (h lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(slices.Clone(h.attrs), as...)
	return h
}

func (h lineHandler) WithGroup(string) slog.Handler { return h }
