// Package buildinfo says which binary this is: the version and the commit
// it was built from, as -version prints them and foo_controller_build_info
// exports them.
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
)

// version and revision are set by make image (hack/image, with -ldflags
// -X example.com/foo-controller/pkg/buildinfo.version=...) from git. go
// build's own VCS stamping cannot be relied on for them: it recognises
// only a .git directory, so in a git worktree it records nothing, or the
// commit of a repository around it (golang/go#58218).
var version, revision string

// Build describes the binary. Without the -X stamp, what the Go toolchain
// recorded: since Go 1.24 the main module's version comes from the VCS
// too (the commit's tag, else a pseudo-version naming it, "+dirty" for
// uncommitted changes), and it is "(devel)" with no revision when built
// without VCS information (-buildvcs=false, a worktree, no git).
type Build struct {
	Version             string // module version, "+dirty" included
	Revision            string // full commit hash
	goVersion, platform string
}

// Read returns this binary's Build.
func Read() Build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{Main: debug.Module{Version: "unknown"}}
	}
	return buildOf(bi, version, revision)
}

func buildOf(bi *debug.BuildInfo, stampedVersion, stampedRevision string) Build {
	b := Build{Version: bi.Main.Version, goVersion: bi.GoVersion}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" {
		b.platform = goos + "/" + goarch
	}
	if stampedRevision != "" {
		b.Version, b.Revision = stampedVersion, stampedRevision
	}
	return b
}

// Line is what -version prints: one line, the full commit in it, so that
// an image can be traced to its source (hack/image's test checks it).
func (b Build) Line() string {
	commit := "commit unknown"
	if b.Revision != "" {
		commit = "commit " + b.Revision
	}
	return fmt.Sprintf("foo-controller %s (%s)", b.Version, strings.Join(slices.DeleteFunc(
		[]string{commit, strings.TrimSpace(b.goVersion + " " + b.platform)}, func(s string) bool { return s == "" }), ", "))
}
