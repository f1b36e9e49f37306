// Command omlet-go runs omlet rules built as core modules (`omlet build
// --target core`) on the pure-Go runtime, printing what `omlet run` prints
// for the same inputs.
//
//	omlet-go run ARTIFACT --input FILE [--knowdb K.toml ... | --knowledge C.toml]
//	         [--rule-path-field F | --model M | --rule-path P]
//	         [--output FILE] [--errors FILE] [--batch N] [--concurrency N]
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	omlet "example.invalid/omlet/go"
)

const usage = `usage: omlet-go run ARTIFACT [--input FILE] [--knowdb K.toml ... | --knowledge C.toml]
                    [--rule-path-field F | --model M | --rule-path P]
                    [--output FILE] [--errors FILE] [--batch N] [--concurrency N]`

func main() {
	os.Exit(mainCode(os.Args[1:]))
}

func mainCode(args []string) int {
	if len(args) == 0 || args[0] != "run" {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	o, err := parseRun(args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n%s\n", err, usage)
		return 2
	}
	code, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
}

// runOptions are `omlet-go run`'s options.
type runOptions struct {
	artifact      string
	input         string
	output        string
	errors        string
	knowdb        []string
	knowledge     string
	noKnowledge   bool
	rulePath      string
	rulePathField string
	model         string
	batch         int
	concurrency   int
}

// parseRun reads the options, given before or after the artifact, as
// `--name value` or `--name=value`.
func parseRun(args []string) (runOptions, error) {
	o := runOptions{input: "-", batch: 256, concurrency: runtime.NumCPU() + 1}
	var positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		name, value, hasValue := strings.Cut(a, "=")
		if name == "--no-knowledge" {
			o.noKnowledge = true
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return o, fmt.Errorf("%s needs a value", name)
			}
			i++
			value = args[i]
		}
		switch name {
		case "--input", "-i", "--from":
			o.input = value
		case "--output", "-o", "--to":
			o.output = value
		case "--errors":
			o.errors = value
		case "--knowdb":
			o.knowdb = append(o.knowdb, value)
		case "--knowledge":
			o.knowledge = value
		case "--rule-path":
			o.rulePath = value
		case "--rule-path-field":
			o.rulePathField = value
		case "--model":
			o.model = value
		case "--batch", "--concurrency":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 {
				return o, fmt.Errorf("%s takes a positive number, not %q", name, value)
			}
			if name == "--batch" {
				o.batch = n
			} else {
				o.concurrency = min(n, 256)
			}
		default:
			return o, fmt.Errorf("unknown option %s", name)
		}
	}
	if len(positional) != 1 {
		return o, fmt.Errorf("give one artifact (a core module built by `omlet build --target core`)")
	}
	o.artifact = positional[0]
	routes := 0
	for _, s := range []string{o.rulePath, o.rulePathField, o.model} {
		if s != "" {
			routes++
		}
	}
	if routes > 1 {
		return o, fmt.Errorf("--rule-path, --rule-path-field and --model exclude each other")
	}
	if len(o.knowdb) > 0 && o.knowledge != "" {
		return o, fmt.Errorf("--knowdb and --knowledge exclude each other")
	}
	if o.noKnowledge && (len(o.knowdb) > 0 || o.knowledge != "") {
		return o, fmt.Errorf("--no-knowledge excludes --knowdb and --knowledge")
	}
	return o, nil
}

func (o runOptions) route() omlet.Route {
	switch {
	case o.rulePath != "":
		return omlet.Path(o.rulePath)
	case o.rulePathField != "":
		return omlet.ByField(o.rulePathField)
	case o.model != "":
		return omlet.Model(o.model)
	}
	return omlet.Only
}

// loadOptions are the runtime's options as the environment asks, as the
// omlet CLI reads it: OMLET_UTC_OFFSET (seconds) fixes the offset Now::
// sees; compiled code is kept in $OMLET_CODE_CACHE (off or empty: none),
// else under $XDG_CACHE_HOME or $HOME/.cache, in omlet/wazero.
func loadOptions(k omlet.Knowledge, instances int) omlet.Options {
	o := omlet.Options{Knowledge: k, MaxInstances: instances}
	if v, err := strconv.Atoi(os.Getenv("OMLET_UTC_OFFSET")); err == nil {
		o.UTCOffset = &v
	}
	if v, ok := os.LookupEnv("OMLET_CODE_CACHE"); ok {
		if v != "" && v != "off" {
			o.CompilationCacheDir = v
		}
	} else if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		o.CompilationCacheDir = filepath.Join(x, "omlet", "wazero")
	} else if h := os.Getenv("HOME"); h != "" {
		o.CompilationCacheDir = filepath.Join(h, ".cache", "omlet", "wazero")
	}
	return o
}

// refuseEarly refuses what a run would lose every record to: a model the
// set lacks, or lookups without knowledge (as `omlet run` does).
func refuseEarly(info omlet.RuleInfo, o runOptions, hasKnowledge bool) error {
	if o.model != "" {
		if _, ok := info.Model(o.model); !ok {
			names := make([]string, len(info.Models))
			for i, m := range info.Models {
				names[i] = m.Name
			}
			return fmt.Errorf("configuration: --model %s: the rule set has no such model (its models: %s)", o.model, strings.Join(names, ", "))
		}
	}
	if !hasKnowledge && !o.noKnowledge && len(info.Statements) > 0 {
		first := info.Statements[0]
		more := ""
		if n := len(info.Statements); n > 1 {
			more = fmt.Sprintf(" (and %d more)", n-1)
		}
		return fmt.Errorf("configuration: %s:%d:%d: this rule set looks up the table `%s`%s, but no knowledge was given: pass "+
			"--knowdb knowdb.toml or --knowledge config.toml, or --no-knowledge to run with every lookup absent",
			first.File, first.Line, first.Column, first.Table, more)
	}
	return nil
}
