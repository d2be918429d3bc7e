package main

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// version describes this build for --version.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return versionOf(bi)
}

// pseudoVersion matches the tail of a Go pseudo-version
// (v0.0.0-20260101120000-abcdef123456), which names a commit, not a tag.
var pseudoVersion = regexp.MustCompile(`\d{14}-[0-9a-f]{12}$`)

// versionOf describes a build: the module version when it was built from a
// tagged module (go install …@v1.2.3), as "v1.2.3 (go1.26.0)"; otherwise the
// VCS revision the build recorded (go build or go install from a checkout),
// as "devel commit 0123456789ab, modified, 2026-12-01T10:00:00Z (go1.26.0)";
// otherwise the pseudo-version, which holds the commit (go install …@hash);
// otherwise "devel".
func versionOf(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	base, dirty := strings.CutSuffix(strings.TrimSuffix(v, "+incompatible"), "+dirty")
	tagged := strings.HasPrefix(v, "v") && !dirty && !pseudoVersion.MatchString(base)
	if tagged {
		return v + " (" + bi.GoVersion + ")"
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
			at = ", " + s.Value
		}
	}
	switch {
	case rev != "":
		return "devel commit " + rev[:min(len(rev), 12)] + modified + at + " (" + bi.GoVersion + ")"
	case strings.HasPrefix(v, "v"):
		return v + " (" + bi.GoVersion + ")"
	}
	return "devel (" + bi.GoVersion + ")"
}
