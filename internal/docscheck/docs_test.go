package docscheck

import (
	"bufio"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the module's root, two levels above this package.
const repoRoot = "../.."

// TestDocLinksResolve checks every relative link and #anchor in the
// user documentation against the files and headings in the tree.
func TestDocLinksResolve(t *testing.T) {
	files := docFiles(t)
	if len(files) < 3 {
		t.Fatalf("found %d documentation files under %s, want README.md, docs/*.md and examples/**/README.md", len(files), repoRoot)
	}
	c := newChecker(osFS{})
	for _, f := range files {
		for _, problem := range c.check(f) {
			t.Errorf("%s", problem)
		}
	}
}

// TestCheckerCatchesBrokenLinks is the negative control: a link checker
// that passes everything would pass TestDocLinksResolve too.
func TestCheckerCatchesBrokenLinks(t *testing.T) {
	files := mapFS{
		"docs/a.md": "# Caps, shares, or both\n\n## `MaxInFlight`: a cap\n\n## Fair dispatch (`Fair` and `Weight`)\n\n" +
			"## Sizing `MaxParked`\n\n## Sizing `MaxParked`\n\n" +
			"Setext heading\n---\n\n<a id=\"custom\"></a>\n",
		"docs/b.md": "see [ok](a.md#caps-shares-or-both), [ok](a.md#maxinflight-a-cap), [ok](a.md#fair-dispatch-fair-and-weight),\n" +
			"[ok](a.md#sizing-maxparked-1), [ok](a.md#setext-heading), [ok](a.md#custom), [ok](./a.md), [ok](../docs/),\n" +
			"[ext](https://example.com/x.md#nope), [mail](mailto:x@y), [self](#see-also)\n\n" +
			"```\n[in code](missing.md)\n```\n\n`[inline](missing.md)`\n\n## See also\n\n" +
			"[bad anchor](a.md#caps-maxinflight) and [bad file](nowhere.md) and ![bad image](shot.png)\n" +
			"[bad self](#nope) and [bad dup](a.md#sizing-maxparked-2)\n\n[ref]: gone.md#x\n",
	}
	c := newChecker(files)
	if got := c.check("docs/a.md"); len(got) != 0 {
		t.Errorf("a.md has no links, yet: %q", got)
	}
	got := c.check("docs/b.md")
	want := []string{
		`docs/b.md:13: a.md#caps-maxinflight: no heading or anchor "caps-maxinflight" in docs/a.md`,
		`docs/b.md:13: nowhere.md: no file docs/nowhere.md`,
		`docs/b.md:13: shot.png: no file docs/shot.png`,
		`docs/b.md:14: #nope: no heading or anchor "nope" in docs/b.md`,
		`docs/b.md:14: a.md#sizing-maxparked-2: no heading or anchor "sizing-maxparked-2" in docs/a.md`,
		`docs/b.md:16: gone.md#x: no file docs/gone.md`,
	}
	if !slices.Equal(want, got) {
		t.Errorf("problems (-want,+got):\n-%s\n+%s", strings.Join(want, "\n-"), strings.Join(got, "\n+"))
	}
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Caps, shares, or both", "caps-shares-or-both"},
		{"Fair dispatch (`Fair` and `Weight`)", "fair-dispatch-fair-and-weight"},
		{"`admitq quota`", "admitq-quota"},
		{"FailOpen: how far over the limit", "failopen-how-far-over-the-limit"},
		{"Redis Cluster and replicas", "redis-cluster-and-replicas"},
		{"What `Enqueue` costs over bare asynq", "what-enqueue-costs-over-bare-asynq"},
		{"snake_case and kebab-case", "snake_case-and-kebab-case"},
		{"**Bold** and [a link](x.md)", "bold-and-a-link"},
		{"Depth & fairness: 2 × 3", "depth--fairness-2--3"},
		{"Émigré tenants", "émigré-tenants"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

// docFiles lists the documentation the test holds to its links.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(repoRoot, d)
		files = append(files, filepath.ToSlash(rel))
	}
	err = filepath.WalkDir(filepath.Join(repoRoot, "examples"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "README.md" {
			rel, _ := filepath.Rel(repoRoot, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// tree is what the checker reads: the repository, or a map in the
// negative control. Paths are slash-separated and relative to the root.
type tree interface {
	read(path string) (string, error)
	exists(path string) bool
}

type osFS struct{}

func (osFS) read(p string) (string, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(p)))
	return string(b), err
}

func (osFS) exists(p string) bool {
	_, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(p)))
	return err == nil
}

type mapFS map[string]string

func (m mapFS) read(p string) (string, error) {
	s, ok := m[p]
	if !ok {
		return "", fs.ErrNotExist
	}
	return s, nil
}

func (m mapFS) exists(p string) bool {
	if _, ok := m[p]; ok {
		return true
	}
	for k := range m {
		if strings.HasPrefix(k, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

type checker struct {
	tree    tree
	anchors map[string]map[string]bool // file → its anchors, read once
}

func newChecker(t tree) *checker {
	return &checker{tree: t, anchors: map[string]map[string]bool{}}
}

var (
	// inlineLink matches [text](target) and ![alt](target "title"); the
	// text may hold one level of brackets (a linked image or code).
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+"[^"]*")?\s*\)`)
	// refDef matches a reference definition: [name]: target.
	refDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+(<[^>]*>|\S+)`)
	// htmlLink matches href="..." and src="..." in inline HTML.
	htmlLink   = regexp.MustCompile(`\b(?:href|src)="([^"]*)"`)
	htmlAnchor = regexp.MustCompile(`<a\s[^>]*\b(?:name|id)="([^"]+)"`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	atxHeading = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$`)
	setextLine = regexp.MustCompile(`^\s{0,3}(=+|-+)\s*$`)
)

// check returns one line per link in file that leads nowhere, as
// "file:line: target: why".
func (c *checker) check(file string) []string {
	text, err := c.tree.read(file)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", file, err)}
	}
	var problems []string
	for _, l := range proseLines(text) {
		line := withoutCodeSpans(l.text)
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, m := range htmlLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if why := c.resolve(file, strings.Trim(target, "<>")); why != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", file, l.n, target, why))
			}
		}
	}
	return problems
}

// resolve says why target, a link in file, leads nowhere, or "".
func (c *checker) resolve(file, target string) string {
	if target == "" {
		return "empty link"
	}
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // another site, or mailto: the test stays offline
	}
	p, anchor, _ := strings.Cut(target, "#")
	if q, _, ok := strings.Cut(p, "?"); ok {
		p = q
	}
	dest := file
	if p != "" {
		unescaped, err := url.PathUnescape(p)
		if err != nil {
			return fmt.Sprintf("bad escape: %v", err)
		}
		if strings.HasPrefix(unescaped, "/") {
			return "a link from the site's root works on GitHub only; make it relative"
		}
		dest = pathJoin(pathDir(file), unescaped)
		if strings.HasPrefix(dest, "../") || dest == ".." {
			return "leads out of the repository"
		}
		if !c.tree.exists(dest) {
			return "no file " + dest
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(dest, ".md") {
		return "" // GitHub's own anchors (#L10 in source files)
	}
	anchors, err := c.anchorsOf(dest)
	if err != nil {
		return err.Error()
	}
	want, err := url.PathUnescape(anchor)
	if err != nil {
		return fmt.Sprintf("bad escape: %v", err)
	}
	if !anchors[strings.ToLower(want)] {
		return fmt.Sprintf("no heading or anchor %q in %s", want, dest)
	}
	return ""
}

// anchorsOf returns the anchors GitHub makes for file: a slug per
// heading (the second of a kind gets -1, the third -2), and every
// <a name> or id.
func (c *checker) anchorsOf(file string) (map[string]bool, error) {
	if a, ok := c.anchors[file]; ok {
		return a, nil
	}
	text, err := c.tree.read(file)
	if err != nil {
		return nil, err
	}
	a := map[string]bool{}
	seen := map[string]int{}
	add := func(heading string) {
		s := slug(heading)
		if n := seen[s]; n > 0 {
			a[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			a[s] = true
		}
		seen[s]++
	}
	lines := proseLines(text)
	for i, l := range lines {
		if m := atxHeading.FindStringSubmatch(l.text); m != nil {
			add(m[2])
		} else if i+1 < len(lines) && lines[i+1].n == l.n+1 && setextLine.MatchString(lines[i+1].text) &&
			strings.TrimSpace(l.text) != "" && !setextLine.MatchString(l.text) &&
			(i == 0 || lines[i-1].n != l.n-1 || strings.TrimSpace(lines[i-1].text) == "") {
			add(l.text)
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l.text, -1) {
			a[strings.ToLower(m[1])] = true
		}
	}
	c.anchors[file] = a
	return a, nil
}

var (
	linkInHeading = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag       = regexp.MustCompile(`<[^>]+>`)
)

// slug is GitHub's anchor for a heading: the rendered text in lower
// case, without punctuation other than - and _, with each space a -.
func slug(heading string) string {
	s := linkInHeading.ReplaceAllString(heading, "$1")
	s = htmlTag.ReplaceAllString(s, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(s)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

type proseLine struct {
	n    int // 1-based line number
	text string
}

// proseLines returns text's lines outside fenced code blocks.
func proseLines(text string) []proseLine {
	var out []proseLine
	var fence string // the open fence's marker, "" outside one
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " \t>")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
			}
			continue
		}
		if f := fenceOf(trimmed); f != "" {
			fence = f
			continue
		}
		out = append(out, proseLine{n: n, text: line})
	}
	return out
}

// fenceOf returns the fence a line opens (``` or ~~~, three or more), or "".
func fenceOf(line string) string {
	for _, ch := range []string{"`", "~"} {
		i := 0
		for i < len(line) && line[i:i+1] == ch {
			i++
		}
		if i >= 3 && (ch == "~" || !strings.Contains(line[i:], "`")) {
			return line[:i]
		}
	}
	return ""
}

// withoutCodeSpans removes `code` spans from line: a link inside one is
// text, not a link. A span closes at the next run of as many backticks.
func withoutCodeSpans(line string) string {
	var b strings.Builder
	for {
		i := strings.Index(line, "`")
		if i < 0 {
			b.WriteString(line)
			return b.String()
		}
		n := i
		for n < len(line) && line[n] == '`' {
			n++
		}
		run := line[i:n]
		end := -1
		for j := n; j < len(line); {
			k := strings.Index(line[j:], run)
			if k < 0 {
				break
			}
			k += j
			if k+len(run) == len(line) || line[k+len(run)] != '`' {
				if k == 0 || line[k-1] != '`' {
					end = k
					break
				}
			}
			for k < len(line) && line[k] == '`' {
				k++
			}
			j = k
		}
		if end < 0 { // no closing run: the backticks are text
			b.WriteString(line[:n])
			line = line[n:]
			continue
		}
		b.WriteString(line[:i])
		line = line[end+len(run):]
	}
}

func pathDir(p string) string {
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[:i]
	}
	return "."
}

// pathJoin joins and cleans slash paths, keeping a trailing / off.
func pathJoin(dir, rel string) string {
	return strings.TrimPrefix(filepath.ToSlash(filepath.Clean(filepath.Join(filepath.FromSlash(dir), filepath.FromSlash(rel)))), "./")
}
