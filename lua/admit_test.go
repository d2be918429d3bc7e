package lua_test

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/admitq/admitq/lua"
)

// TestAdmitCarriesItsFile checks that Admit runs admit.lua, or in a build
// with a stand-in tag the floor AdmitStandIn names (make test runs it
// under each tag), byte for byte: a benchmark that measured the wrong
// script would pass every other check.
func TestAdmitCarriesItsFile(t *testing.T) {
	file := "admit.lua"
	if s := lua.AdmitStandIn(); s != "" {
		path, _, _ := strings.Cut(s, " ")
		file = strings.TrimPrefix(path, "lua/")
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	if got, want := lua.Admit().Hash(), hex.EncodeToString(sum[:]); got != want {
		t.Errorf("Admit runs the script with SHA1 %s; %s has %s", got, file, want)
	}
}
