package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// stage is what the Dockerfile's final stage says about the image.
type stage struct {
	user       string
	entrypoint []string
	ports      []string
	labels     map[string]string
	// binary is where the final stage copies the binary, without the leading slash.
	binary string
}

// readFinalStage reads USER, EXPOSE, ENTRYPOINT (exec form), LABEL and the COPY of the binary from the
// last FROM of path on. Instructions it does not know in that stage are an error: the image would
// silently differ from what docker builds.
func readFinalStage(path string) (stage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return stage{}, err
	}
	// Join continuation lines; drop comments and blank lines.
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(l)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur.WriteString(strings.TrimSuffix(t, "\\") + " ")
			continue
		}
		cur.WriteString(t)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	last := -1
	for i, l := range lines {
		if strings.EqualFold(strings.Fields(l)[0], "FROM") {
			last = i
		}
	}
	if last < 0 {
		return stage{}, fmt.Errorf("%s: no FROM", path)
	}
	st := stage{labels: map[string]string{}}
	for _, l := range lines[last+1:] {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "USER":
			st.user = rest
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				st.ports = append(st.ports, p)
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &st.entrypoint); err != nil {
				return stage{}, fmt.Errorf("%s: ENTRYPOINT must be in exec form (a JSON array): %w", path, err)
			}
		case "LABEL":
			if err := parseLabels(rest, st.labels); err != nil {
				return stage{}, fmt.Errorf("%s: LABEL %s: %w", path, rest, err)
			}
		case "COPY":
			f := strings.Fields(rest)
			if len(f) != 3 || !strings.HasPrefix(f[0], "--from=") || st.binary != "" {
				return stage{}, fmt.Errorf("%s: COPY %s: want one COPY --from=STAGE BINARY DEST, of the binary", path, rest)
			}
			st.binary = strings.TrimPrefix(f[2], "/")
		default:
			return stage{}, fmt.Errorf("%s: hack/image does not know %s in the final stage; teach it, or the two images would differ", path, instr)
		}
	}
	switch {
	case st.user == "" || len(st.entrypoint) == 0 || st.binary == "":
		return stage{}, fmt.Errorf("%s: the final stage needs USER, ENTRYPOINT and COPY of the binary", path)
	case st.entrypoint[0] != "/"+st.binary:
		return stage{}, fmt.Errorf("%s: ENTRYPOINT %q does not run the copied binary /%s", path, st.entrypoint, st.binary)
	}
	return st, nil
}

// parseLabels parses LABEL's key="value" pairs into into.
func parseLabels(s string, into map[string]string) error {
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		key, rest, ok := strings.Cut(s, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			return errors.New("want key=\"value\" pairs")
		}
		if !strings.HasPrefix(rest, `"`) {
			v, tail, _ := strings.Cut(rest, " ")
			into[key], s = v, tail
			continue
		}
		v, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return fmt.Errorf("value of %s: %w", key, err)
		}
		if into[key], err = strconv.Unquote(v); err != nil {
			return err
		}
		s = rest[len(v):]
	}
	return nil
}
