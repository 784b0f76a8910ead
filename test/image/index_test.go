package image_test

import (
	"bytes"
	"debug/elf"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/runner-guard/runner-guard/test/render"
)

// ociLayoutPath is the OCI image layout `make image` writes (the multi-arch
// index the release workflow pushes).
func ociLayoutPath(t *testing.T) string {
	p := render.Tool(t, "RUNNER_GUARD_IMAGE_OCI", "bin/runner-guard-image-oci", makeImage)
	render.Tool(t, "", filepath.Join(p, "index.json"), makeImage)
	return p
}

// layoutIndex reads the OCI image layout at dir: index.json must name one
// OCI image index (desc), the multi-arch image, whose manifest is m.
func layoutIndex(t *testing.T, dir string) (desc v1.Descriptor, idx v1.ImageIndex, m *v1.IndexManifest) {
	t.Helper()
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	topManifest, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(topManifest.Manifests) != 1 || topManifest.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json names %+v, want one OCI image index", topManifest.Manifests)
	}
	desc = topManifest.Manifests[0]
	if idx, err = top.ImageIndex(desc.Digest); err == nil {
		m, err = idx.IndexManifest()
	}
	if err != nil {
		t.Fatalf("the image index %s: %v", desc.Digest, err)
	}
	return desc, idx, m
}

// wantMachine is the ELF machine of each architecture the index must hold.
var wantMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// TestImageIndex inspects both architectures' manifests in the index: each is
// an OCI image for its platform whose /webhook is a static binary for that
// architecture, with the same user, entrypoint and labels; and the
// docker-archive `make image` writes for this machine holds the index's image
// of this architecture (so the other's files are read here, this one's by
// TestImage).
func TestImageIndex(t *testing.T) {
	desc, idx, m := layoutIndex(t, ociLayoutPath(t))
	if ref := desc.Annotations["org.opencontainers.image.ref.name"]; ref == "" {
		t.Errorf("index.json: the index has no org.opencontainers.image.ref.name annotation")
	}
	if m.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %q, want %q", m.MediaType, types.OCIImageIndex)
	}

	byArch := map[string]v1.Descriptor{}
	for _, d := range m.Manifests {
		if d.Platform == nil {
			t.Errorf("manifest %s has no platform", d.Digest)
			continue
		}
		if _, dup := byArch[d.Platform.Architecture]; dup {
			t.Errorf("two manifests for %s", d.Platform.Architecture)
		}
		byArch[d.Platform.Architecture] = d
	}
	var archs []string
	for a := range byArch {
		archs = append(archs, a)
	}
	slices.Sort(archs)
	if !slices.Equal(archs, []string{"amd64", "arm64"}) {
		t.Fatalf("index architectures %v, want [amd64 arm64]", archs)
	}

	// The docker-archive (kind load, the node suite) is this machine's image
	// of the same build: its config, which lists the layers' diff IDs, is
	// the index's for runtime.GOARCH, so TestImage's look inside it covers
	// that architecture's files too.
	archive, err := tarball.ImageFromPath(imagePath(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	archiveConfig, err := archive.ConfigName()
	if err != nil {
		t.Fatal(err)
	}

	configs := map[string]v1.Hash{}
	for arch, d := range byArch {
		t.Run(arch, func(t *testing.T) {
			if d.Platform.OS != "linux" {
				t.Errorf("platform OS %q, want linux", d.Platform.OS)
			}
			if d.MediaType != types.OCIManifestSchema1 {
				t.Errorf("manifest media type %q, want %q", d.MediaType, types.OCIManifestSchema1)
			}
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			im, err := img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			if im.Config.MediaType != types.OCIConfigJSON {
				t.Errorf("config media type %q, want %q", im.Config.MediaType, types.OCIConfigJSON)
			}
			for _, l := range im.Layers {
				if !l.MediaType.IsLayer() || l.MediaType == types.DockerLayer {
					t.Errorf("layer %s media type %q, want an OCI layer", l.Digest, l.MediaType)
				}
			}
			configs[arch] = im.Config.Digest
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != arch {
				t.Errorf("config platform %s/%s, want linux/%s", cf.OS, cf.Architecture, arch)
			}
			if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/webhook"}) {
				t.Errorf("user %q entrypoint %q, want 65532:65532 and [/webhook]", cf.Config.User, cf.Config.Entrypoint)
			}
			if l := cf.Config.Labels; l["org.opencontainers.image.title"] != "runner-guard" || l["org.opencontainers.image.version"] == "" {
				t.Errorf("labels = %v, want title runner-guard and a version", l)
			}
			if im.Config.Digest == archiveConfig {
				t.Logf("linux/%s is the docker-archive's image, whose files TestImage reads", arch)
				return
			}
			files := flatten(t, img)
			bin, ok := files["/webhook"]
			if !ok {
				t.Fatalf("no /webhook; files: %v", slices.Sorted(maps.Keys(files)))
			}
			if _, ok := files["/etc/ssl/certs/ca-certificates.crt"]; !ok {
				t.Error("no CA bundle at /etc/ssl/certs/ca-certificates.crt")
			}
			ef, err := elf.NewFile(bytes.NewReader(bin.data))
			if err != nil {
				t.Fatalf("/webhook is not an ELF binary: %v", err)
			}
			defer ef.Close()
			if ef.Machine != wantMachine[arch] {
				t.Errorf("/webhook is built for %s, want %s", ef.Machine, wantMachine[arch])
			}
			for _, prog := range ef.Progs {
				if prog.Type == elf.PT_INTERP {
					t.Error("/webhook is dynamically linked")
				}
			}
		})
	}
	if configs["amd64"] == configs["arm64"] {
		t.Errorf("both architectures share config %s", configs["amd64"])
	}
	if _, ok := configs[runtime.GOARCH]; ok && configs[runtime.GOARCH] != archiveConfig {
		t.Errorf("docker-archive config %s, want the index's linux/%s config %s: make image wrote them from different builds", archiveConfig, runtime.GOARCH, configs[runtime.GOARCH])
	}
}
