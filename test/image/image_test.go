package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/runner-guard/runner-guard/test/render"
)

// makeImage says how to build what these tests read.
const makeImage = "run make image (make test does too)"

// imagePath is this machine's image as a docker-archive.
func imagePath(t *testing.T) string {
	return render.Tool(t, "RUNNER_GUARD_IMAGE", "bin/runner-guard-image.tar", makeImage)
}

type file struct {
	hdr  *tar.Header
	data []byte
}

func TestImage(t *testing.T) {
	p := imagePath(t)

	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(p) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 {
		t.Fatalf("tarball holds %d images, want 1", len(m))
	}
	if !slices.Contains(m[0].RepoTags, "runner-guard:latest") {
		t.Errorf("RepoTags = %v, want runner-guard:latest among them", m[0].RepoTags)
	}
	for _, tag := range m[0].RepoTags {
		if !strings.HasPrefix(tag, "runner-guard:") {
			t.Errorf("tag %q: want runner-guard:VERSION with no registry host", tag)
		}
	}

	img, cf := loadArchive(t, p)
	if cf.Config.User != "65532:65532" {
		t.Errorf("user = %q, want 65532:65532", cf.Config.User)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/webhook"}) || len(cf.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/webhook] and no cmd", cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	labels := cf.Config.Labels
	if labels["org.opencontainers.image.title"] != "runner-guard" || labels["org.opencontainers.image.version"] == "" {
		t.Errorf("labels = %v, want title runner-guard and a version", labels)
	}
	for k, v := range labels {
		if strings.Contains(v, "://") && !strings.HasSuffix(k, ".source") {
			t.Errorf("label %s=%q names a host", k, v)
		}
	}
	if d, err := img.Digest(); err != nil {
		t.Error(err)
	} else {
		t.Logf("image %s, tags %v, labels %v", d, m[0].RepoTags, labels)
	}

	// The flattened file system.
	files := flatten(t, img)
	bin, ok := files["/webhook"]
	if !ok {
		t.Fatalf("no /webhook in the image; files: %v", slices.Sorted(maps.Keys(files)))
	}
	if bin.hdr.Typeflag != tar.TypeReg || bin.hdr.Mode&0o777 != 0o755 || bin.hdr.Uid != 0 {
		t.Errorf("/webhook: type %c mode %o uid %d, want a root-owned regular file with mode 0755", bin.hdr.Typeflag, bin.hdr.Mode, bin.hdr.Uid)
	}
	if f := files["/etc/passwd"]; !strings.Contains(string(f.data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd lacks the nonroot user 65532: %q", f.data)
	}
	if f := files["/etc/group"]; !strings.Contains(string(f.data), "nonroot:x:65532:") {
		t.Errorf("/etc/group lacks the nonroot group 65532: %q", f.data)
	}
	if f, ok := files["/tmp"]; !ok || f.hdr.Typeflag != tar.TypeDir || f.hdr.Mode&0o7777 != 0o1777 {
		t.Errorf("/tmp missing or not mode 1777")
	}
	if f, ok := files["/etc/ssl/certs/ca-certificates.crt"]; !ok || !bytes.Contains(f.data, []byte("BEGIN CERTIFICATE")) {
		t.Errorf("no CA bundle at /etc/ssl/certs/ca-certificates.crt: the webhook could not verify GitHub's certificate")
	}

	// Static: no program interpreter (CGO_ENABLED=0).
	ef, err := elf.NewFile(bytes.NewReader(bin.data))
	if err != nil {
		t.Fatalf("/webhook is not an ELF binary: %v", err)
	}
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Error("/webhook is dynamically linked")
		}
	}
	ef.Close()

	// Run it.
	if runtime.GOOS != cf.OS || runtime.GOARCH != cf.Architecture {
		t.Skipf("cannot run a %s/%s binary here", cf.OS, cf.Architecture)
	}
	exe := filepath.Join(t.TempDir(), "webhook")
	if err := os.WriteFile(exe, bin.data, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "--help").CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 2) {
		t.Fatalf("/webhook --help: %v (want exit 0 or 2)\n%s", err, out)
	}
	if !strings.Contains(string(out), "-webhook-port") {
		t.Errorf("/webhook --help does not mention --webhook-port:\n%s", out)
	}
}

// loadArchive is the image of a docker-archive and its config.
func loadArchive(t *testing.T, path string) (v1.Image, *v1.ConfigFile) {
	t.Helper()
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return img, cf
}

// flatten returns the image's flattened file system by absolute path.
func flatten(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	files := map[string]file{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files["/"+strings.Trim(hdr.Name, "/")] = file{hdr, data}
	}
}
