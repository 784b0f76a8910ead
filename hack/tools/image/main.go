// Command image builds container images for static binaries without a
// container engine. It writes them as a docker-archive tarball (what
// `docker load` and `kind load image-archive` read; go-containerregistry's
// tarball.ImageFromPath reads it too) for one architecture, and, with
// -platform, as an OCI image layout whose index.json names one multi-arch OCI
// image index (one image per architecture). `image push` pushes that index to
// a registry.
//
// Each image is the runtime part of the repository's Dockerfile rebuilt on an
// empty base: the binary, /etc/passwd and /etc/group with the nonroot user
// 65532, /tmp, /home/nonroot and the host's CA bundle (for HTTPS to GitHub);
// config User 65532:65532, Entrypoint [binary]. Layer contents and config
// carry fixed timestamps, so the same binaries give the same digests.
//
//	image -binary bin/linux-amd64/webhook -path /webhook -out bin/runner-guard-image.tar \
//	      -tag runner-guard:v1.2.3 -tag runner-guard:latest -version v1.2.3
//	image -platform amd64=bin/linux-amd64/webhook -platform arm64=bin/linux-arm64/webhook \
//	      -oci-layout bin/runner-guard-oci -out bin/runner-guard-image.tar -tag runner-guard:v1.2.3
//	image push -oci-layout bin/runner-guard-oci -ref REPOSITORY:v1.2.3 -digest-file bin/image-digest
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
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	uid = 65532
	gid = 65532
	// refNameAnnotation names the index in the layout's index.json.
	refNameAnnotation = "org.opencontainers.image.ref.name"
)

// listFlag is a repeatable flag: each use adds its value whole, so a
// label's value may hold commas (-label KEY=a,b is one label).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("empty value")
	}
	*l = append(*l, v)
	return nil
}

// ociLabels are the org.opencontainers.image.<name> labels the flag -<name>
// sets, with its default.
var ociLabels = []struct{ name, def string }{
	{"title", "runner-guard"}, {"version", "dev"}, {"description", ""}, {"source", ""}, {"revision", ""},
}

type options struct {
	binary, path, out, ociLayout, caBundle string
	os, arch                               string
	tags, labels, platforms                listFlag
	// oci holds the ociLabels flags' values by name.
	oci map[string]*string
}

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "push" {
		err = pushMain(os.Args[2:])
	} else {
		err = buildMain(os.Args[1:])
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

// errUsage: the flag package has already printed what was wrong.
var errUsage = errors.New("usage")

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return nil
}

func buildMain(args []string) error {
	var o options
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.StringVar(&o.binary, "binary", "", "static binary to put into the image of -arch (or use -platform)")
	fs.Var(&o.platforms, "platform", "ARCH=BINARY: one image of the OCI index per architecture (repeatable; needs -oci-layout)")
	fs.StringVar(&o.path, "path", "/webhook", "absolute path of the binary in the image; also the entrypoint")
	fs.StringVar(&o.out, "out", "", "docker-archive tarball to write with the image of -arch")
	fs.StringVar(&o.ociLayout, "oci-layout", "", "OCI image layout directory to write with the multi-arch index of the -platform images")
	fs.Var(&o.tags, "tag", "image reference to record, e.g. runner-guard:v1 (repeatable; at least one)")
	o.oci = map[string]*string{}
	for _, l := range ociLabels {
		o.oci[l.name] = fs.String(l.name, l.def, "org.opencontainers.image."+l.name+" label (omitted when empty)")
	}
	fs.Var(&o.labels, "label", "extra label KEY=VALUE (repeatable)")
	fs.StringVar(&o.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM CA bundle to install at /etc/ssl/certs/ca-certificates.crt; empty for none")
	fs.StringVar(&o.os, "os", "linux", "image OS")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "architecture (GOARCH) of -binary, and of the -platform image -out holds")
	if err := parse(fs, args); err != nil {
		return err
	}
	return build(o)
}

// platformBinaries maps each architecture to its binary: -binary for -arch,
// or the -platform list.
func platformBinaries(o options) (map[string]string, error) {
	bins := map[string]string{}
	switch {
	case o.binary != "" && len(o.platforms) > 0:
		return nil, errors.New("-binary and -platform are mutually exclusive")
	case o.binary != "":
		bins[o.arch] = o.binary
		return bins, nil
	case len(o.platforms) == 0:
		return nil, errors.New("-binary or -platform is required")
	}
	for _, p := range o.platforms {
		arch, bin, ok := strings.Cut(p, "=")
		if !ok || arch == "" || bin == "" {
			return nil, fmt.Errorf("-platform %q: want ARCH=BINARY", p)
		}
		if _, dup := bins[arch]; dup {
			return nil, fmt.Errorf("-platform %q: architecture %s given twice", p, arch)
		}
		bins[arch] = bin
	}
	return bins, nil
}

func build(o options) error {
	bins, err := platformBinaries(o)
	if err != nil {
		return err
	}
	switch {
	case o.out == "" && o.ociLayout == "":
		return errors.New("-out or -oci-layout is required")
	case o.ociLayout != "" && len(o.platforms) == 0:
		return errors.New("-oci-layout needs -platform")
	case o.out != "" && bins[o.arch] == "":
		return fmt.Errorf("-out: no -platform binary for -arch %s", o.arch)
	case len(o.tags) == 0:
		return errors.New("at least one -tag is required")
	case !path.IsAbs(o.path) || path.Clean(o.path) != o.path || o.path == "/":
		return fmt.Errorf("-path %q must be a clean absolute file path", o.path)
	}
	tags := make([]name.Tag, 0, len(o.tags))
	for _, t := range o.tags {
		tag, err := name.NewTag(t)
		if err != nil {
			return fmt.Errorf("-tag %q: %w", t, err)
		}
		tags = append(tags, tag)
	}
	var caPEM []byte
	if o.caBundle != "" {
		if caPEM, err = os.ReadFile(o.caBundle); err != nil {
			return fmt.Errorf("CA bundle (-ca-bundle= for none): %w", err)
		}
	}
	labels, err := imageLabels(o)
	if err != nil {
		return err
	}
	arches := make([]string, 0, len(bins))
	for arch := range bins {
		arches = append(arches, arch)
	}
	slices.Sort(arches)
	images := map[string]v1.Image{}
	for _, arch := range arches {
		bin, err := os.ReadFile(bins[arch])
		if err != nil {
			return err
		}
		if images[arch], err = newImage(o.path, bin, caPEM, o.os, arch, labels); err != nil {
			return fmt.Errorf("%s/%s image: %w", o.os, arch, err)
		}
	}
	if o.out != "" {
		if err := writeArchive(o.out, images[o.arch], tags); err != nil {
			return err
		}
		digest, err := images[o.arch].Digest()
		if err != nil {
			return err
		}
		fmt.Printf("wrote %s (%s/%s, %s, tags %s)\n", o.out, o.os, o.arch, digest, strings.Join(o.tags, " "))
	}
	if o.ociLayout != "" {
		idx, err := newIndex(images, arches, o.os)
		if err != nil {
			return err
		}
		if err := writeLayout(o.ociLayout, idx, tags); err != nil {
			return err
		}
		digest, err := idx.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("wrote %s (OCI index %s: %s/%s)\n", o.ociLayout, digest, o.os, strings.Join(arches, ", "+o.os+"/"))
	}
	return nil
}

func imageLabels(o options) (map[string]string, error) {
	labels := map[string]string{}
	for name, v := range o.oci {
		if *v != "" {
			labels["org.opencontainers.image."+name] = *v
		}
	}
	for _, kv := range o.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-label %q: want KEY=VALUE", kv)
		}
		labels[k] = v
	}
	return labels, nil
}

// newImage is one architecture's image, with OCI media types throughout.
func newImage(binPath string, bin, caPEM []byte, goos, arch string, labels map[string]string) (v1.Image, error) {
	layerTar, err := rootfs(binPath, bin, caPEM)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			CreatedBy: "runner-guard hack/tools/image: " + binPath + ", /etc/passwd, /etc/group, CA bundle",
			Comment:   "built without a container engine",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = goos, arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.User = fmt.Sprintf("%d:%d", uid, gid)
	cf.Config.Entrypoint = []string{binPath}
	cf.Config.Cmd = nil
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cf.Config.Labels = labels
	return mutate.ConfigFile(img, cf)
}

// newIndex is the OCI image index of images, one manifest per architecture
// with its platform, in the order of arches.
func newIndex(images map[string]v1.Image, arches []string, goos string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range arches {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        images[arch],
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: arch}},
		})
	}
	return idx, nil
}

func writeArchive(out string, img v1.Image, tags []name.Tag) error {
	refs := map[name.Reference]v1.Image{}
	for _, tag := range tags {
		refs[tag] = img
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

// writeLayout replaces dir with an OCI image layout whose index.json names
// idx once, annotated with the first tag's tag part (as `docker buildx
// --output type=oci` does).
func writeLayout(dir string, idx v1.ImageIndex, tags []name.Tag) error {
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameAnnotation: tags[0].TagStr()})); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// pushMain pushes the index of an OCI layout written by build to each -ref,
// with the credentials of the Docker config (docker login, or the CI's
// registry login step), and writes the index digest to -digest-file.
func pushMain(args []string) error {
	var dir, digestFile string
	var refs listFlag
	fs := flag.NewFlagSet("image push", flag.ContinueOnError)
	fs.StringVar(&dir, "oci-layout", "", "OCI image layout written by image -oci-layout (required)")
	fs.Var(&refs, "ref", "REPOSITORY:TAG to push the index to (repeatable; at least one)")
	fs.StringVar(&digestFile, "digest-file", "", "file to write the pushed index's digest (sha256:...) to")
	if err := parse(fs, args); err != nil {
		return err
	}
	if dir == "" || len(refs) == 0 {
		return errors.New("push: -oci-layout and -ref are required")
	}
	idx, err := layoutIndex(dir)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	for _, r := range refs {
		ref, err := name.NewTag(r)
		if err != nil {
			return fmt.Errorf("-ref %q: %w", r, err)
		}
		if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Printf("pushed %s@%s\n", ref, digest)
	}
	if digestFile != "" {
		return os.WriteFile(digestFile, []byte(digest.String()+"\n"), 0o644)
	}
	return nil
}

// layoutIndex is the one image index the layout's index.json names.
func layoutIndex(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("-oci-layout %s: %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("-oci-layout %s: %w", dir, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("-oci-layout %s: %w", dir, err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		return nil, fmt.Errorf("-oci-layout %s: index.json names %d manifests, want one OCI image index", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
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
