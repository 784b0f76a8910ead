// Package docs_test checks the project's Markdown: every relative link names a
// file that exists, every anchor a heading (or an explicit anchor) of its
// target, and the README stays short enough to read in five minutes.
package docs_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeMaxLines is the README's budget: what it does, the demo, the install,
// and links; everything else lives under docs/.
const readmeMaxLines = 250

var (
	// inlineLink matches [text](target), the target without spaces.
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// htmlAnchor matches an explicit <a id="..."> or <a name="...">.
	htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
	// slugDrop is what GitHub drops from a heading when it makes its anchor.
	slugDrop = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
)

// repoRoot is two levels up from test/docs.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// markdownFiles lists the repository's Markdown files, skipping build outputs
// and test data.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules", "testdata", "dist":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// document is one Markdown file's links and anchors, code blocks left out.
type document struct {
	links   []link
	anchors map[string]bool
}

type link struct {
	line   int
	target string
}

// slug is GitHub's anchor for a heading: lower case, punctuation dropped,
// spaces made hyphens.
func slug(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = slugDrop.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

func parse(path string) (document, error) {
	f, err := os.Open(path)
	if err != nil {
		return document{}, err
	}
	defer f.Close()
	doc := document{anchors: map[string]bool{}}
	seen := map[string]int{}
	inCode := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimLeft(h, "#")
			if strings.HasPrefix(h, " ") {
				a := slug(h)
				// GitHub numbers repeated headings: x, x-1, x-2, ...
				if k := seen[a]; k > 0 {
					doc.anchors[fmt.Sprintf("%s-%d", a, k)] = true
				} else {
					doc.anchors[a] = true
				}
				seen[a]++
			}
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			doc.anchors[m[1]] = true
		}
		// Inline code spans may show link syntax as an example.
		for _, m := range inlineLink.FindAllStringSubmatch(stripCodeSpans(line), -1) {
			doc.links = append(doc.links, link{line: n, target: m[1]})
		}
	}
	return doc, sc.Err()
}

func stripCodeSpans(line string) string {
	parts := strings.Split(line, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = ""
	}
	return strings.Join(parts, "")
}

func TestRelativeLinksAndAnchors(t *testing.T) {
	root := repoRoot(t)
	docs := map[string]document{}
	load := func(path string) (document, error) {
		if d, ok := docs[path]; ok {
			return d, nil
		}
		d, err := parse(path)
		if err == nil {
			docs[path] = d
		}
		return d, err
	}
	files := markdownFiles(t, root)
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files under %s; the walk is broken", len(files), root)
	}
	checked := 0
	for _, file := range files {
		doc, err := load(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, l := range doc.links {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(l.target, "#")
			target := file
			if path != "" {
				target = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", rel, l.line, l.target, path)
					continue
				}
			}
			checked++
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			td, err := load(target)
			if err != nil {
				t.Fatal(err)
			}
			if !td.anchors[anchor] {
				t.Errorf("%s:%d: link %q: no heading or anchor #%s in %s", rel, l.line, l.target, anchor, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link checked")
	}
}

func TestREADMEIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move detail to docs/", n, readmeMaxLines)
	}
}

func TestSlug(t *testing.T) {
	cases := map[string]string{
		"Config file (`--config`)":                             "config-file---config",
		"The install window: Ignore until the webhook answers": "the-install-window-ignore-until-the-webhook-answers",
		"With Helm": "with-helm",
		"GitHub's rate limits during a large drain": "githubs-rate-limits-during-a-large-drain",
	}
	for in, want := range cases {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
