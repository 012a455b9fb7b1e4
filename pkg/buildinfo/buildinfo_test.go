package buildinfo

import (
	"runtime/debug"
	"testing"
)

// TestVersion: -version prints which binary this is, with the full commit
// when the build stamped one (hack/image's TestImage runs it in the image).
// That -version is answered whatever other flags say: TestVersionFlag, in
// the root package.
func TestVersion(t *testing.T) {
	const rev = "b0414cf5c2d4e8a1f0e9d7c6b5a4938271605f4e"
	unstamped := debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"}}}
	for _, tc := range []struct {
		name                       string
		bi                         debug.BuildInfo
		stampedVersion, stampedRev string
		want                       string
	}{{
		name:           "stamped by make image, uncommitted changes",
		bi:             unstamped,
		stampedVersion: "v0.0.0-20261124092600-b0414cf5c2d4+dirty", stampedRev: rev,
		want: "foo-controller v0.0.0-20261124092600-b0414cf5c2d4+dirty (commit " + rev + ", go1.26.8 linux/amd64)",
	}, {
		name: "stamped by go build in a clone",
		bi: debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261124092600-b0414cf5c2d4"},
			Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
				{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}},
		want: "foo-controller v0.0.0-20261124092600-b0414cf5c2d4 (commit " + rev + ", go1.26.8 linux/arm64)",
	}, {
		name: "not stamped (-buildvcs=false, go run)",
		bi:   unstamped,
		want: "foo-controller (devel) (commit unknown, go1.26.8 linux/amd64)",
	}} {
		if got := buildOf(&tc.bi, tc.stampedVersion, tc.stampedRev).Line(); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
