package image_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestLabels: each -label is one label with its value whole, commas and all
// (an image description is prose), and a label without a key is refused.
func TestLabels(t *testing.T) {
	tool, dir := imageTool(t), t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("not run"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	build := func(labels ...string) ([]byte, error) {
		args := []string{"-binary", bin, "-path", "/bin", "-out", out, "-ca-bundle=", "-tag", "labels:test", "-arch", "amd64"}
		for _, l := range labels {
			args = append(args, "-label", l)
		}
		return exec.Command(tool, args...).CombinedOutput()
	}
	if log, err := build("org.example.note=one, two", "org.example.empty="); err != nil {
		t.Fatalf("image: %v\n%s", err, log)
	}
	_, cf := loadArchive(t, out)
	if got := cf.Config.Labels["org.example.note"]; got != "one, two" {
		t.Errorf("label org.example.note = %q, want %q (labels %v)", got, "one, two", cf.Config.Labels)
	}
	if got, ok := cf.Config.Labels["org.example.empty"]; !ok || got != "" {
		t.Errorf("label org.example.empty = %q (set %v), want an empty value", got, ok)
	}
	if log, err := build("=no-key"); err == nil {
		t.Errorf("-label =no-key accepted, want KEY=VALUE refused:\n%s", log)
	}
}
