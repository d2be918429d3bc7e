package main

import (
	"runtime/debug"
	"strings"
)

// version describes this build for --version: the module version when it
// was installed as a module (go install …@v1.2.3), else "(devel)", with the
// VCS revision and whether the checkout had changes, when the build
// recorded them (go build or go install from a checkout does).
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, modified, at string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		case "vcs.time":
			at = s.Value
		}
	}
	var extra []string
	if rev != "" {
		extra = append(extra, "commit "+rev[:min(len(rev), 12)]+modified)
	}
	if at != "" {
		extra = append(extra, at)
	}
	extra = append(extra, bi.GoVersion)
	return v + " (" + strings.Join(extra, ", ") + ")"
}
