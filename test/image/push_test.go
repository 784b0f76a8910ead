package image_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/runner-guard/runner-guard/test/render"
)

// imageTool is bin/image (hack/tools/image), which `make image` builds.
func imageTool(t *testing.T) string {
	return render.Tool(t, "IMAGE_TOOL", "bin/image", makeImage)
}

// TestPushIndex pushes the index the way the release workflow does
// (`make image-push`: image push) to an in-memory registry on loopback and
// reads it back: the registry serves the same OCI index, with both
// architectures' manifests, under the tag, and the digest file names it.
func TestPushIndex(t *testing.T) {
	tool, dir := imageTool(t), ociLayoutPath(t)
	desc, _, _ := layoutIndex(t, dir)
	want := desc.Digest

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ref := u.Host + "/runner-guard:v0.0.0-test"
	digestFile := filepath.Join(t.TempDir(), "digest")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, "push", "-oci-layout", dir, "-ref", ref, "-digest-file", digestFile)
	// No Docker config: the loopback registry takes anonymous pushes.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "DOCKER_CONFIG="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("image push: %v\n%s", err, out)
	}
	b, err := os.ReadFile(digestFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != want.String() {
		t.Errorf("digest file %q, want the layout's index %s", got, want)
	}

	manifest := func(method, ref string, accept types.MediaType) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+"/v2/runner-guard/manifests/"+ref, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", string(accept))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := manifest(http.MethodGet, "v0.0.0-test", types.OCIImageIndex)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the tag: %s", resp.Status)
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != want.String() {
		t.Errorf("registry serves %s under the tag, want %s", got, want)
	}
	if ct := resp.Header.Get("Content-Type"); ct != string(types.OCIImageIndex) {
		t.Errorf("Content-Type %q, want %q", ct, types.OCIImageIndex)
	}
	m, err := v1.ParseIndexManifest(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range m.Manifests {
		if d.Platform != nil {
			platforms = append(platforms, d.Platform.String())
		}
		// Each platform's manifest was pushed too.
		hr := manifest(http.MethodHead, d.Digest.String(), d.MediaType)
		hr.Body.Close()
		if hr.StatusCode != http.StatusOK {
			t.Errorf("manifest %s (%v): %s", d.Digest, d.Platform, hr.Status)
		}
	}
	if strings.Join(platforms, " ") != "linux/amd64 linux/arm64" {
		t.Errorf("pushed index platforms %v, want [linux/amd64 linux/arm64]", platforms)
	}
}
