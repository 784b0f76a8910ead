// Command image builds a container image for one static binary without a
// container engine, and writes it as a docker-archive tarball (what
// `docker load` and `kind load image-archive` read; go-containerregistry's
// tarball.ImageFromPath reads it too).
//
// The image is the runtime part of the repository's Dockerfile rebuilt on an
// empty base: the binary, /etc/passwd and /etc/group with the nonroot user
// 65532, /tmp, /home/nonroot and the host's CA bundle (for HTTPS to GitHub);
// config User 65532:65532, Entrypoint [binary]. Layer contents and config
// carry fixed timestamps, so the same binary gives the same image digest.
//
//	image -binary bin/linux-amd64/webhook -path /webhook -out bin/runner-guard-image.tar \
//	      -tag runner-guard:v1.2.3 -tag runner-guard:latest -version v1.2.3
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const (
	uid = 65532
	gid = 65532
)

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

type options struct {
	binary, path, out, version, title, description, source, revision, caBundle string
	os, arch                                                                   string
	tags, labels                                                               listFlag
}

func main() {
	var o options
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.StringVar(&o.binary, "binary", "", "static binary to put into the image (required)")
	fs.StringVar(&o.path, "path", "/webhook", "absolute path of the binary in the image; also the entrypoint")
	fs.StringVar(&o.out, "out", "", "docker-archive tarball to write (required)")
	fs.Var(&o.tags, "tag", "image reference to record in the tarball, e.g. runner-guard:v1 (repeatable; at least one)")
	fs.StringVar(&o.version, "version", "dev", "org.opencontainers.image.version label")
	fs.StringVar(&o.title, "title", "runner-guard", "org.opencontainers.image.title label")
	fs.StringVar(&o.description, "description", "", "org.opencontainers.image.description label")
	fs.StringVar(&o.source, "source", "", "org.opencontainers.image.source label (omitted when empty)")
	fs.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision label (omitted when empty)")
	fs.Var(&o.labels, "label", "extra label KEY=VALUE (repeatable)")
	fs.StringVar(&o.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle to install at /etc/ssl/certs/ca-certificates.crt; empty for none")
	fs.StringVar(&o.os, "os", "linux", "image OS")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "image architecture (GOARCH)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err := build(o); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func build(o options) error {
	switch {
	case o.binary == "":
		return errors.New("-binary is required")
	case o.out == "":
		return errors.New("-out is required")
	case len(o.tags) == 0:
		return errors.New("at least one -tag is required")
	case !path.IsAbs(o.path) || path.Clean(o.path) != o.path || o.path == "/":
		return fmt.Errorf("-path %q must be a clean absolute file path", o.path)
	}
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return err
	}
	var caPEM []byte
	if o.caBundle != "" {
		if caPEM, err = os.ReadFile(o.caBundle); err != nil {
			return fmt.Errorf("CA bundle (-ca-bundle= for none): %w", err)
		}
	}
	layerTar, err := rootfs(o.path, bin, caPEM)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			CreatedBy: "runner-guard hack/tools/image: " + o.path + ", /etc/passwd, /etc/group, CA bundle",
			Comment:   "built without a container engine",
		},
	})
	if err != nil {
		return err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":   o.title,
		"org.opencontainers.image.version": o.version,
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.description": o.description,
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.revision":    o.revision,
	} {
		if v != "" {
			labels[k] = v
		}
	}
	for _, kv := range o.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("-label %q: want KEY=VALUE", kv)
		}
		labels[k] = v
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = o.os, o.arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.User = fmt.Sprintf("%d:%d", uid, gid)
	cf.Config.Entrypoint = []string{o.path}
	cf.Config.Cmd = nil
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cf.Config.Labels = labels
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}

	refs := map[name.Reference]v1.Image{}
	for _, t := range o.tags {
		tag, err := name.NewTag(t)
		if err != nil {
			return fmt.Errorf("-tag %q: %w", t, err)
		}
		refs[tag] = img
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	tmp := o.out + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, o.out); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s/%s, %s, tags %s)\n", o.out, o.os, o.arch, digest, strings.Join(o.tags, " "))
	return nil
}

// rootfs returns the single layer's uncompressed tar.
func rootfs(binPath string, bin, caPEM []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	dirs := map[string]bool{}
	dir := func(p string, mode int64, owner int) error {
		if dirs[p] {
			return nil
		}
		dirs[p] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(p, "/") + "/", Mode: mode,
			Uid: owner, Gid: owner, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(p string, mode int64, data []byte) error {
		// Parent directories first, root-owned 0755.
		var parents []string
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if err := dir(d, 0o755, 0); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: mode,
			Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, gid)
	group := fmt.Sprintf("root:x:0:\nnobody:x:65534:\nnonroot:x:%d:\n", gid)
	steps := []func() error{
		func() error { return dir("/etc", 0o755, 0) },
		func() error { return file("/etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("/etc/group", 0o644, []byte(group)) },
		func() error { return dir("/home", 0o755, 0) },
		func() error { return dir("/home/nonroot", 0o700, uid) },
		func() error { return dir("/tmp", 0o1777, 0) },
		func() error { return file(binPath, 0o755, bin) },
	}
	if len(caPEM) > 0 {
		steps = append(steps, func() error { return file("/etc/ssl/certs/ca-certificates.crt", 0o644, caPEM) })
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
