// Command image builds foo-controller's container image without a Docker
// engine or a registry, with go-containerregistry: one layer holding the
// static binary, on nothing (FROM scratch). It writes a tarball that
// `docker load`, `kind load image-archive` and `crane push` read, and can
// push it itself. `make image` runs it; see artifacts/deploy/README.md.
//
// The same commit gives the same image digest, byte for byte: the binary
// is built with -trimpath, every timestamp is the commit's, and the tar and
// JSON have one order. TestImage builds it twice to show it.
//
// It is a module of its own so that go-containerregistry never enters what
// the controller links.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

const (
	// entrypoint is the binary's path in the image.
	entrypoint = "/foo-controller"
	// user is distroless's "nonroot", which the Deployment's
	// securityContext names (runAsUser, runAsGroup). Numeric: the image has
	// no /etc/passwd, and the kubelet checks runAsNonRoot on the number.
	user = "65532:65532"
	// defaultTag is what artifacts/deploy/kustomization.yaml points the
	// image at, so that a tarball loaded into kind is the one it runs.
	defaultTag = "example.com/foo-controller:dev"
	// buildinfo is the package whose version and revision the build
	// stamps (-ldflags -X): what the binary's -version prints.
	buildinfo = "example.com/foo-controller/pkg/buildinfo"
)

func main() {
	var o options
	flag.StringVar(&o.out, "o", "", "Write the image tarball here (default: _output/foo-controller.tar in the repository).")
	flag.StringVar(&o.tag, "tag", defaultTag, "Name and tag of the image, in the tarball and for -push.")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "GOARCH to build for (the image is linux/<arch>).")
	flag.BoolVar(&o.push, "push", false, "Also push the image to -tag's registry, with the credentials docker login stored.")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected argument %q", flag.Arg(0)))
	}
	ctx := context.Background()
	repo, err := gitOutput(".", "rev-parse", "--show-toplevel")
	if err != nil {
		fail(err)
	}
	o.repo = repo
	if o.out == "" {
		o.out = filepath.Join(repo, "_output", "foo-controller.tar")
	} else if !filepath.IsAbs(o.out) {
		// go -C hack/image runs us from hack/image: a relative path means
		// the caller's, and the only caller that gives one is a person
		// at the repository's root (make image gives none).
		o.out = filepath.Join(repo, o.out)
	}
	// A bad name fails now, not after the build.
	if _, err := name.NewTag(o.tag); err != nil {
		fail(fmt.Errorf("-tag %q: %w", o.tag, err))
	}
	img, st, err := build(ctx, o)
	if err != nil {
		fail(err)
	}
	digest, err := write(img, o)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s %s (%s, commit %s)\n  digest %s\n", o.tag, o.out, st.version, st.revision, digest)
	if o.push {
		pushed, err := push(ctx, img, o.tag)
		if err != nil {
			fail(err)
		}
		fmt.Printf("pushed %s\n", pushed)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "image: %v\n", err)
	os.Exit(1)
}

type options struct {
	repo, out, tag, arch string
	push                 bool
}

// stamp is what the binary says about its source (the version and
// revision of example.com/foo-controller/pkg/buildinfo) and the time every
// timestamp in the image is set to.
type stamp struct {
	version, revision string
	time              time.Time
}

// build builds the controller binary and the image around it.
func build(ctx context.Context, o options) (v1.Image, stamp, error) {
	st, err := stampOf(o.repo)
	if err != nil {
		return nil, st, err
	}
	tmp, err := os.MkdirTemp("", "foo-image-")
	if err != nil {
		return nil, st, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bin := filepath.Join(tmp, "foo-controller")
	// -buildvcs=false and the stamp by -X instead: go build's own VCS
	// stamping recognises only a .git directory, so in a git worktree it
	// records nothing, or the commit of a repository around it
	// (golang/go#58218). CGO_ENABLED=0: a static binary, for an image
	// with no libc.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -X "+buildinfo+".version="+st.version+" -X "+buildinfo+".revision="+st.revision,
		"-o", bin, ".")
	cmd.Dir, cmd.Stdout, cmd.Stderr = o.repo, os.Stderr, os.Stderr
	// The caller's Go settings stay out: GOFLAGS=-cover or GOAMD64=v3
	// would make another binary under the same version and labels, and a
	// go.work around the repository another build.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.arch,
		"GOFLAGS=", "GOWORK=off", "GOEXPERIMENT=", "GOAMD64=v1", "GOARM64=v8.0")
	if err := cmd.Run(); err != nil {
		return nil, st, fmt.Errorf("building the controller: %w", err)
	}
	content, err := os.ReadFile(bin)
	if err != nil {
		return nil, st, err
	}

	// The layer holds the binary and nothing else: no shell, no libc, no
	// /etc. Owned by root, so the user it runs as cannot change it.
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: strings.TrimPrefix(entrypoint, "/"), Mode: 0o755,
		Size: int64(len(content)), ModTime: st.time, Format: tar.FormatPAX,
	}); err != nil {
		return nil, st, err
	}
	if _, err := tw.Write(content); err != nil {
		return nil, st, err
	}
	if err := tw.Close(); err != nil {
		return nil, st, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	})
	if err != nil {
		return nil, st, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: st.time}, CreatedBy: "hack/image: go build -trimpath (CGO_ENABLED=0)",
	}})
	if err != nil {
		return nil, st, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, st, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: st.time}
	cf.OS, cf.Architecture = "linux", o.arch
	cf.Config.Entrypoint = []string{entrypoint}
	cf.Config.User = user
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.revision": st.revision,
		"org.opencontainers.image.version":  st.version,
		"org.opencontainers.image.created":  st.time.UTC().Format(time.RFC3339),
	}
	img, err = mutate.ConfigFile(img, cf)
	return img, st, err
}

// stampOf reads the commit and its time from git, and names the version
// as Go ≥1.24 would stamp it in a clone: the commit's tag, else a
// pseudo-version of the commit; "+dirty" when the tree has changes not
// committed (untracked files included, as git status shows them). The time
// is $SOURCE_DATE_EPOCH if set, else the commit's.
func stampOf(repo string) (stamp, error) {
	var st stamp
	var err error
	if st.revision, err = gitOutput(repo, "rev-parse", "HEAD"); err != nil {
		return st, err
	}
	commitTime, err := unixTime(gitOutput(repo, "log", "-1", "--format=%ct", "HEAD"))
	if err != nil {
		return st, err
	}
	st.time = commitTime
	if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
		if st.time, err = unixTime(e, nil); err != nil {
			return st, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
		}
	}

	if tag, err := gitOutput(repo, "describe", "--tags", "--exact-match", "--match=v[0-9]*", "HEAD"); err == nil && semver.IsValid(tag) {
		st.version = tag
	} else {
		// Based on the last tag before it, as Go does: v1.2.3 gives v1.2.4-0.<time>-<rev>.
		older, _ := gitOutput(repo, "describe", "--tags", "--abbrev=0", "--match=v[0-9]*", "HEAD")
		if !semver.IsValid(older) {
			older = ""
		}
		st.version = module.PseudoVersion(semver.Major(older), older, commitTime, st.revision[:12])
	}
	status, err := gitOutput(repo, "status", "--porcelain")
	if err != nil {
		return st, err
	}
	if status != "" {
		st.version += "+dirty"
	}
	return st, nil
}

// write writes the image tarball (docker's format, with the image's tag
// in it) and returns the image's digest.
func write(img v1.Image, o options) (v1.Hash, error) {
	ref, err := name.NewTag(o.tag)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return v1.Hash{}, err
	}
	if err := tarball.WriteToFile(o.out, ref, img); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

// push pushes the image to its tag and returns the reference by digest,
// the one to deploy (kustomize edit set image ...).
func push(ctx context.Context, img v1.Image, tag string) (string, error) {
	ref, err := name.NewTag(tag)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return ref.Context().Digest(d.String()).String(), nil
}

func unixTime(s string, err error) (time.Time, error) {
	if err != nil {
		return time.Time{}, err
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("not a time in seconds: %q", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
