// Renders a Helm chart as `helm template` does, for the tests: Helm itself cannot be
// installed on these machines, so this is its engine, not a lookalike: Go's text/template
// with the sprig functions Helm uses (Debian's golang-github-masterminds-sprig-dev) and
// Helm's own additions (include, tpl, required, toYaml, fromYaml, toJson, lookup, which
// finds nothing as under `helm template`). Values: the chart's values.yaml, then each -f
// file, then each --set path=value, merged as Helm merges them.
//
//	helm-render [-f values.yaml]... [--set a.b=c]... [--namespace ns] [--name release] [--is-upgrade] CHART_DIR
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"

	sprig "github.com/Masterminds/sprig/v3"
	yaml "gopkg.in/yaml.v3"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var files, sets list
	name, namespace := "sandgate", "default"
	upgrade := false
	args := os.Args[1:]
	var chart string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-f", "--values":
			i++
			files = append(files, args[i])
		case "--set":
			i++
			sets = append(sets, args[i])
		case "--name":
			i++
			name = args[i]
		case "--is-upgrade":
			upgrade = true
		case "--namespace", "-n":
			i++
			namespace = args[i]
		default:
			chart = args[i]
		}
	}
	if chart == "" {
		fail("usage: helm-render [-f values.yaml]... [--set a.b=c]... [--namespace ns] [--name release] CHART_DIR")
	}
	out, err := render(chart, files, sets, name, namespace, upgrade)
	if err != nil {
		fail(err.Error())
	}
	os.Stdout.WriteString(out)
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "Error:", msg)
	os.Exit(1)
}

func readYAML(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return m, nil
}

// merge: src into dst, maps deeply, anything else replaced (null deletes the key), as Helm's coalescing.
func merge(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		if sm, ok := v.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				dst[k] = merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

func parseSet(values map[string]interface{}, s string) error {
	eq := strings.Index(s, "=")
	if eq < 0 {
		return fmt.Errorf("--set %q: want path=value", s)
	}
	path, raw := strings.Split(s[:eq], "."), s[eq+1:]
	var v interface{} = raw
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
		v = n
	} else if raw == "true" || raw == "false" {
		v = raw == "true"
	} else if raw == "null" {
		v = nil
	}
	m := values
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[p] = next
		}
		m = next
	}
	if v == nil {
		delete(m, path[len(path)-1])
	} else {
		m[path[len(path)-1]] = v
	}
	return nil
}

func toYAML(v interface{}) string {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func render(chart string, files, sets []string, name, namespace string, upgrade bool) (string, error) {
	meta, err := readYAML(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	values, err := readYAML(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return "", err
	}
	for _, f := range files {
		m, err := readYAML(f)
		if err != nil {
			return "", err
		}
		values = merge(values, m)
	}
	for _, s := range sets {
		if err := parseSet(values, s); err != nil {
			return "", err
		}
	}
	chartObj := map[string]interface{}{}
	for k, v := range meta {
		chartObj[strings.ToUpper(k[:1])+k[1:]] = v
	}
	top := map[string]interface{}{
		"Values":  values,
		"Chart":   chartObj,
		"Release": map[string]interface{}{"Name": name, "Namespace": namespace, "Service": "Helm", "IsInstall": !upgrade, "IsUpgrade": upgrade, "Revision": 1},
		"Capabilities": map[string]interface{}{
			"KubeVersion": map[string]interface{}{"Version": "v1.34.0", "Major": "1", "Minor": "34", "GitVersion": "v1.34.0"},
		},
		"Template": map[string]interface{}{"BasePath": "sandgate/templates"},
	}
	root := template.New("chart")
	funcs := sprig.TxtFuncMap()
	funcs["include"] = func(n string, data interface{}) (string, error) {
		var b bytes.Buffer
		err := root.ExecuteTemplate(&b, n, data)
		return b.String(), err
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var b bytes.Buffer
		err = t.Execute(&b, data)
		return b.String(), err
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil || v == "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		_ = yaml.Unmarshal([]byte(s), &m)
		return m
	}
	funcs["lookup"] = func(...string) map[string]interface{} { return map[string]interface{}{} }
	root.Funcs(funcs).Option("missingkey=zero")

	tdir := filepath.Join(chart, "templates")
	entries, err := os.ReadDir(tdir)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".tpl")) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(tdir, n))
		if err != nil {
			return "", err
		}
		if _, err := root.New("sandgate/templates/" + n).Parse(string(data)); err != nil {
			return "", err
		}
		names = append(names, n)
	}
	sort.Strings(names)
	var out strings.Builder
	for _, n := range names {
		if strings.HasPrefix(n, "_") {
			continue
		}
		full := "sandgate/templates/" + n
		top["Template"].(map[string]interface{})["Name"] = full
		var b bytes.Buffer
		if err := root.ExecuteTemplate(&b, full, top); err != nil {
			return "", err
		}
		text := strings.ReplaceAll(b.String(), "<no value>", "")
		if strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", full, strings.TrimSpace(text))
	}
	return out.String(), nil
}
