package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/certapi/certapi/test/framework"
)

// versionsFile declares the version claims of the documentation once.
const versionsFile = "hack/versions.yaml"

// versions is versionsFile.
type versions struct {
	Kubernetes struct {
		Minimum  string `json:"minimum"`
		Features []struct {
			Minor    string   `json:"minor"`
			What     string   `json:"what"`
			Keywords []string `json:"keywords"`
		} `json:"features"`
	} `json:"kubernetes"`
	Kubectl struct {
		Plugins          string `json:"plugins"`
		CreateSubcommand string `json:"createSubcommand"`
		PluginCompletion string `json:"pluginCompletion"`
	} `json:"kubectl"`
	Helm struct {
		Tested []string `json:"tested"`
	} `json:"helm"`
}

func readVersions(t *testing.T, root string) versions {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, versionsFile))
	if err != nil {
		t.Fatal(err)
	}
	var v versions
	if err := yaml.UnmarshalStrict(data, &v); err != nil {
		t.Fatalf("%s: %v", versionsFile, err)
	}
	return v
}

// testedMinors reads the Makefile's MINORS, the Kubernetes minors make test-matrix runs, oldest first.
func testedMinors(t *testing.T, root string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^MINORS \?= (.+)$`).FindStringSubmatch(readFile(t, root, "Makefile"))
	if m == nil {
		t.Fatal("Makefile: no line MINORS ?= ...")
	}
	return strings.Fields(m[1])
}

// TestVersionsMatchTheCode holds versionsFile to what the code enforces or tests: the chart's kubeVersion,
// a docs/matrix result for every tested minor, and a tools module for every tested Helm major.
func TestVersionsMatchTheCode(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	v := readVersions(t, root)
	if want := ">= " + v.Kubernetes.Minimum + ".0-0"; !strings.Contains(readFile(t, root, "artifacts/charts/certapi/Chart.yaml"), "kubeVersion: \""+want+"\"") {
		t.Errorf("artifacts/charts/certapi/Chart.yaml: kubeVersion is not %q, the minimum %s declares", want, versionsFile)
	}
	minors := testedMinors(t, root)
	if compareMinor(minors[0], v.Kubernetes.Minimum) < 0 {
		t.Errorf("the Makefile's MINORS test %s, older than the minimum %s of %s", minors[0], v.Kubernetes.Minimum, versionsFile)
	}
	for _, m := range minors {
		if _, err := os.Stat(filepath.Join(root, "docs", "matrix", "kubernetes-"+m+".json")); err != nil {
			t.Errorf("the Makefile's MINORS name %s, which has no result in docs/matrix (make test-matrix MINORS=%s): %v", m, m, err)
		}
	}
	for _, want := range []string{v.Kubectl.Plugins, v.Kubectl.CreateSubcommand, v.Kubectl.PluginCompletion} {
		if !regexp.MustCompile(`^1\.[0-9]+$`).MatchString(want) {
			t.Errorf("%s: kubectl minimum %q is not a minor (1.N)", versionsFile, want)
		}
	}

	// The Helm majors the tools modules build, against the declaration.
	built := map[string]bool{}
	mods, err := filepath.Glob(filepath.Join(root, "hack", "tools", "*", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// A direct requirement: `require helm.sh/helm/vN vX` or a line of a require block, not `// indirect`.
	requires := regexp.MustCompile(`(?m)^\s*(?:require\s+)?helm\.sh/helm/v([0-9]+) v\S+\s*$`)
	for _, mod := range mods {
		data, err := os.ReadFile(mod)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range requires.FindAllSubmatch(data, -1) {
			built[string(m[1])] = true
		}
	}
	for _, major := range v.Helm.Tested {
		if !built[major] {
			t.Errorf("%s declares Helm %s tested, but no module under hack/tools requires helm.sh/helm/v%s", versionsFile, major, major)
		}
	}
	for major := range built {
		if !slices.Contains(v.Helm.Tested, major) {
			t.Errorf("hack/tools builds Helm %s, which %s does not declare tested", major, versionsFile)
		}
	}
}

// claimFiles are the texts a user reads version claims in: every page markdownFiles covers, the
// Makefile's help, and the Go sources of the commands (their --help) and of the release (the krew
// manifests' descriptions).
func claimFiles(t *testing.T, root string) []string {
	t.Helper()
	files, err := markdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "Makefile", "hack/release/main.go")
	for _, dir := range []string{"cmd", "pkg/cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				rel, err := filepath.Rel(root, path)
				if err != nil {
					return err
				}
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// flatten joins a file's lines into one text as a reader sees it: comment markers and indentation gone,
// so that a claim wrapped over two lines reads as one. offsets maps a position of the text to its line.
func flatten(content string) (text string, lineAt func(pos int) int) {
	marker := regexp.MustCompile(`^\s*(?://|##?|\*)?\s*`)
	var b strings.Builder
	var starts []int
	for _, line := range strings.Split(content, "\n") {
		starts = append(starts, b.Len())
		b.WriteString(marker.ReplaceAllString(line, ""))
		b.WriteByte(' ')
	}
	return b.String(), func(pos int) int {
		i, _ := slices.BinarySearch(starts, pos+1)
		return i
	}
}

// sentenceAround is the text of the sentence around pos, bounded to a few hundred characters.
func sentenceAround(text string, start, end int) string {
	from := max(0, start-250)
	if i := strings.LastIndex(text[from:start], ". "); i >= 0 {
		from += i + 2
	}
	to := min(len(text), end+250)
	if i := strings.Index(text[end:to], ". "); i >= 0 {
		to = end + i
	}
	return text[from:to]
}

var (
	kubernetesClaim = regexp.MustCompile(`Kubernetes \(?(1\.[0-9]+)(?:\+| or newer| or later| and newer| and later)`)
	kubectlClaim    = regexp.MustCompile(`kubectl \(?(1\.[0-9]+)(?:\+| or newer| or later| and newer| and later)`)
	sinceClaim      = regexp.MustCompile(`kubectl[^.]{0,80}? since (1\.[0-9]+)`)
	rangeClaims     = []*regexp.Regexp{
		regexp.MustCompile(`(?:Kubernetes|minors?|from) (1\.[0-9]+) ?(?:to|-|–) ?(1\.[0-9]+)`),
		regexp.MustCompile(`(1\.[0-9]+) ?(?:to|-|–) ?(1\.[0-9]+),? (?:are|is) (?:not )?tested`),
		regexp.MustCompile(`\((1\.[0-9]+) ?(?:to|-|–) ?(1\.[0-9]+) today\)`),
	}
	helmTested    = regexp.MustCompile(`tested with Helm ([0-9]+)(?: and (?:Helm )?([0-9]+))?`)
	helmNotTested = regexp.MustCompile(`Helm ([0-9]+)[^.;]{0,80}?not tested`)
)

// TestVersionClaims fails when a page, the Makefile or a command's help states a Kubernetes, kubectl or
// Helm version other than the ones versionsFile declares: the minimum Kubernetes (or that of a declared
// feature, named in the same sentence), the tested minors as the Makefile's MINORS, the kubectl minimum
// of what the sentence is about (`kubectl create servingcertrequest`, completion, any plugin), and the
// Helm majors tested.
func TestVersionClaims(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	v := readVersions(t, root)
	minors := testedMinors(t, root)
	oldest, newest := minors[0], minors[len(minors)-1]
	untestedTo := fmt.Sprintf("1.%d", minorNumber(oldest)-1)

	for _, file := range claimFiles(t, root) {
		text, lineAt := flatten(readFile(t, root, file))
		where := func(pos int) string { return fmt.Sprintf("%s:%d", file, lineAt(pos)) }

		for _, m := range kubernetesClaim.FindAllStringSubmatchIndex(text, -1) {
			got := text[m[2]:m[3]]
			if got == v.Kubernetes.Minimum {
				continue
			}
			sentence := sentenceAround(text, m[0], m[1])
			ok := false
			for _, f := range v.Kubernetes.Features {
				if f.Minor == got && slices.ContainsFunc(f.Keywords, func(k string) bool { return strings.Contains(sentence, k) }) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s: %q: certapi needs Kubernetes %s (%s), and no feature %s declares needs %s is named in %q",
					where(m[0]), text[m[0]:m[1]], v.Kubernetes.Minimum, versionsFile, versionsFile, got, sentence)
			}
		}

		for _, re := range []*regexp.Regexp{kubectlClaim, sinceClaim} {
			for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
				got := text[m[2]:m[3]]
				sentence := sentenceAround(text, m[0], m[1])
				// What the claim is about: the subject named nearest to it in its sentence.
				want, about := v.Kubectl.Plugins, "a kubectl plugin"
				nearest := len(text)
				for _, subject := range []struct{ word, want, about string }{
					{"complet", v.Kubectl.PluginCompletion, "plugin completion (kubectl_complete-certapi)"},
					{"create servingcertrequest", v.Kubectl.CreateSubcommand, "`kubectl create servingcertrequest NAME`"},
					{"create-servingcertrequest", v.Kubectl.CreateSubcommand, "`kubectl create servingcertrequest NAME`"},
					{"`create`", v.Kubectl.CreateSubcommand, "`kubectl create servingcertrequest NAME`"},
				} {
					if d := distance(sentence, strings.Index(sentence, text[m[0]:m[1]]), subject.word); d < nearest {
						nearest, want, about = d, subject.want, subject.about
					}
				}
				// A sentence may give the history of a feature: the earlier minors it names are fine as
				// long as the minimum is the one declared.
				if got != want && !strings.Contains(sentence, "kubectl "+want) && !strings.Contains(sentence, "since "+want) &&
					!strings.Contains(sentence, want+" or later") {
					t.Errorf("%s: %q: %s declares kubectl %s for %s; the sentence: %q", where(m[0]), text[m[0]:m[1]], versionsFile, want, about, sentence)
				}
			}
		}

		for _, re := range rangeClaims {
			for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
				from, to := text[m[2]:m[3]], text[m[4]:m[5]]
				switch {
				case from == oldest && to == newest, from == v.Kubernetes.Minimum && (to == newest || to == untestedTo):
				default:
					t.Errorf("%s: %q: the tested minors are %s to %s (the Makefile's MINORS) and the oldest supported is %s (%s)",
						where(m[0]), text[m[0]:m[1]], oldest, newest, v.Kubernetes.Minimum, versionsFile)
				}
			}
		}

		for _, m := range helmTested.FindAllStringSubmatchIndex(text, -1) {
			for i := 2; i+1 < len(m); i += 2 {
				if m[i] >= 0 && !slices.Contains(v.Helm.Tested, text[m[i]:m[i+1]]) {
					t.Errorf("%s: %q: %s declares the Helm majors tested %v", where(m[0]), text[m[0]:m[1]], versionsFile, v.Helm.Tested)
				}
			}
		}
		for _, m := range helmNotTested.FindAllStringSubmatchIndex(text, -1) {
			if got := text[m[2]:m[3]]; slices.Contains(v.Helm.Tested, got) {
				t.Errorf("%s: %q: Helm %s is tested (%s)", where(m[0]), text[m[0]:m[1]], got, versionsFile)
			}
		}
	}
}

// distance is how far the occurrence of word nearest to position at in s is from it; a large number when
// s does not contain word.
func distance(s string, at int, word string) int {
	best := 1 << 30
	for i := 0; ; {
		j := strings.Index(s[i:], word)
		if j < 0 {
			return best
		}
		best = min(best, max(i+j-at, at-(i+j)))
		i += j + 1
	}
}

// minorNumber is N of "1.N", -1 when it is not one.
func minorNumber(v string) int {
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil || major != 1 {
		return -1
	}
	return minor
}

// compareMinor compares two "1.N" minors.
func compareMinor(a, b string) int {
	return minorNumber(a) - minorNumber(b)
}
