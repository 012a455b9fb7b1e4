//go:build integration

package integration

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// image is the controller's image as make image builds it, unpacked:
// TestInClusterConfig runs its entrypoint as its user, in its own root
// filesystem, so that what ships is what was tested. (What is in it is
// checked by TestImage, in hack/image.)
type image struct {
	rootfs     string
	entrypoint []string
	user       string // "uid:gid"
}

// buildImage builds the image into dir with hack/image (make image's
// tool; reproducible, so the same digest make image prints for this tree)
// and unpacks it.
func buildImage(dir string) (*image, error) {
	tarball := filepath.Join(dir, "foo-controller.tar")
	cmd := exec.Command("go", "-C", "hack/image", "run", ".", "-o", tarball)
	cmd.Dir, cmd.Stdout, cmd.Stderr = repoRoot, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building the image: %w", err)
	}
	return unpackImage(tarball, filepath.Join(dir, "image"))
}

// unpackImage reads a tarball in docker's format (what docker load and
// kind load read) with the standard library alone: manifest.json names
// the config and the layers, in order; the layers are gzipped tars.
func unpackImage(tarball, dir string) (*image, error) {
	blobs := filepath.Join(dir, "blobs")
	if err := untar(tarball, blobs, false); err != nil {
		return nil, err
	}
	var manifest []struct {
		Config string
		Layers []string
	}
	if err := readJSON(filepath.Join(blobs, "manifest.json"), &manifest); err != nil {
		return nil, err
	}
	if len(manifest) != 1 {
		return nil, fmt.Errorf("%s holds %d images, want 1", tarball, len(manifest))
	}
	var config struct {
		Config struct {
			Entrypoint, Cmd []string
			User            string
		} `json:"config"`
	}
	if err := readJSON(filepath.Join(blobs, manifest[0].Config), &config); err != nil {
		return nil, err
	}
	img := &image{rootfs: filepath.Join(dir, "rootfs"), entrypoint: append(config.Config.Entrypoint, config.Config.Cmd...), user: config.Config.User}
	for _, l := range manifest[0].Layers {
		if err := untar(filepath.Join(blobs, l), img.rootfs, true); err != nil {
			return nil, err
		}
	}
	// The root of a container's filesystem is the runtime's to make, and
	// any user may enter it.
	if err := os.Chmod(img.rootfs, 0o755); err != nil {
		return nil, err
	}
	return img, nil
}

// untar extracts regular files and directories, which is all the image
// has; anything else is refused rather than half-handled.
func untar(path, dir string, gzipped bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	var r io.Reader = f
	if gzipped {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		r = gz
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("%s: entry %q leaves the directory", path, h.Name)
		}
		dest := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dest, h.FileInfo().Mode().Perm())
		case tar.TypeReg:
			err = writeFile(dest, tr, h.FileInfo().Mode().Perm())
		default:
			err = fmt.Errorf("%s: entry %q of type %q: not handled", path, h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(path string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
