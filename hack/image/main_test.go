package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage builds the image as make image does, twice, and checks what
// ships: the same digest both times; a tarball that reads back as that
// image under the tag kustomization.yaml uses; the entrypoint and non-root
// user; one file in it, a static binary owned by root; and that binary,
// run, printing the commit it was built from. It is the test of the image
// that TestInClusterConfig then runs against a real API server.
func TestImage(t *testing.T) {
	repo := git(t, "rev-parse", "--show-toplevel")
	head := git(t, "rev-parse", "HEAD")
	dirty := git(t, "status", "--porcelain") != ""
	dir := t.TempDir()
	o := options{repo: repo, out: filepath.Join(dir, "a.tar"), tag: defaultTag, arch: runtime.GOARCH}

	img, st, err := build(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := write(img, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s, digest %s", st.version, st.revision, digest)

	// Reproducible: a second build from the same tree is the same image,
	// and the same tarball byte for byte.
	o2 := o
	o2.out = filepath.Join(dir, "b.tar")
	img2, _, err := build(t.Context(), o2)
	if err != nil {
		t.Fatal(err)
	}
	if digest2, err := write(img2, o2); err != nil || digest2 != digest {
		t.Errorf("a second build gave digest %v (%v), the first %v", digest2, err, digest)
	}
	if a, b := readFile(t, o.out), readFile(t, o2.out); !bytes.Equal(a, b) {
		t.Errorf("the two tarballs differ (%d and %d bytes)", len(a), len(b))
	}

	// The tarball as docker load and kind load read it.
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(o.out) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{defaultTag}) {
		t.Errorf("tarball manifest %+v: want one image, tagged %s", m, defaultTag)
	}
	loaded, err := tarball.ImageFromPath(o.out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := loaded.Digest(); err != nil || d != digest {
		t.Errorf("the tarball holds image %v (%v), want %v", d, err, digest)
	}

	cf, err := loaded.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/foo-controller"}) || len(cf.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q, cmd %q: want [/foo-controller] and no cmd", cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (the Deployment's runAsUser and runAsGroup)", cf.Config.User)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if got := cf.Config.Labels["org.opencontainers.image.revision"]; got != head {
		t.Errorf("revision label %q, want HEAD %s", got, head)
	}

	// Nothing but the binary: no shell, no libc, no /etc.
	bin := filepath.Join(dir, "foo-controller")
	files := extract(t, loaded, bin)
	if want := []string{"foo-controller -rwxr-xr-x 0:0"}; !slices.Equal(files, want) {
		t.Errorf("image files %q, want %q", files, want)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	interp := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	if interp || len(libs) > 0 {
		t.Errorf("the binary is dynamically linked (libraries %q): it cannot run in an image without libc", libs)
	}

	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("foo-controller --version: %v\n%s", err, out)
	}
	version := strings.TrimSpace(string(out))
	t.Logf("foo-controller --version: %s", version)
	if !strings.Contains(version, "commit "+head) {
		t.Errorf("--version printed %q: want the commit %s", version, head)
	}
	if strings.Contains(version, "+dirty") != dirty {
		t.Errorf("--version printed %q; want \"+dirty\" in it exactly when git status shows changes (it shows some: %v)", version, dirty)
	}

	t.Run("push", func(t *testing.T) {
		srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		defer srv.Close()
		tag := strings.TrimPrefix(srv.URL, "http://") + "/foo-controller:test"
		byDigest, err := push(t.Context(), img, tag)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.ParseReference(byDigest)
		if err != nil {
			t.Fatal(err)
		}
		pulled, err := remote.Image(ref)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := pulled.Digest(); err != nil || d != digest {
			t.Errorf("the registry holds %v (%v), want %v", d, err, digest)
		}
	})
}

// extract lists the files of the image's layers as "path mode uid:gid" and
// writes the controller binary to bin.
func extract(t *testing.T, img v1.Image, bin string) []string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, h.Name+" "+h.FileInfo().Mode().String()+" "+strconv.Itoa(h.Uid)+":"+strconv.Itoa(h.Gid))
			if h.Name == "foo-controller" {
				content, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(bin, content, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
		_ = rc.Close()
	}
	return files
}

func git(t *testing.T, args ...string) string {
	t.Helper()
	out, err := gitOutput(".", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
