//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// env is the control plane shared by every test in the package.
var env *cluster

// controllerBin is the controller binary under test, built with -race.
var controllerBin string

// shipped is the image, unpacked: TestInClusterConfig runs the binary in it.
var shipped *image

// repoRoot is the repository root (this package lives in pkg/integration).
var repoRoot = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}()

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctx := context.Background()
	start := time.Now()
	// envtest logs through controller-runtime's logger, which prints a
	// warning with a stack trace when it is used but was never set (here:
	// by the private control planes started later in the run). Its errors
	// reach us as returned errors; its progress lines are not needed.
	ctrllog.SetLogger(logr.Discard())

	testbin, err := testbinDir()
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "foo-integration-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		return 1
	}
	keep := false
	defer func() {
		if !keep {
			_ = os.RemoveAll(dir)
		}
	}()

	// The race detector stays on in the binary: the integration tests are
	// where the controller's goroutines really run concurrently.
	controllerBin = filepath.Join(dir, "foo-controller")
	build := exec.Command("go", "build", "-race", "-o", controllerBin, ".")
	build.Dir, build.Stdout, build.Stderr = repoRoot, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: building the controller: %v\n", err)
		return 1
	}
	if shipped, err = buildImage(dir); err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		return 1
	}

	env, err = startCluster(ctx, repoRoot, testbin, dir, clusterOptions{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		if env != nil {
			env.stop()
		}
		keep = true
		fmt.Fprintf(os.Stderr, "integration: logs kept in %s\n", dir)
		return 1
	}
	fmt.Fprintf(os.Stderr, "integration: control plane up in %v (logs in %s)\n", time.Since(start).Round(time.Millisecond), dir)

	code := m.Run()
	env.stop()
	if code != 0 && os.Getenv("CI") == "" {
		keep = true
		fmt.Fprintf(os.Stderr, "integration: logs kept in %s\n", dir)
	}
	return code
}

// testbinDir returns the directory with the control-plane binaries: the one
// $FOO_TESTBIN names, or else the cache hack/install-testbin.sh fills
// (installing on first use: minutes cold, well under a second after).
func testbinDir() (string, error) {
	if d := os.Getenv("FOO_TESTBIN"); d != "" {
		return d, nil
	}
	cmd := exec.Command(filepath.Join(repoRoot, "hack", "install-testbin.sh"), "--print-dir")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/install-testbin.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
