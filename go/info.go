package omlet

import (
	"encoding/json"
	"fmt"
)

// RuleInfo is what a rule says about itself (omlet_info), read once at load.
type RuleInfo struct {
	// ABI is the core ABI version the module speaks (1).
	ABI uint32 `json:"abi"`
	// IRVersion is the version of the compiled-rule format the guest reads.
	IRVersion uint32 `json:"ir_version"`
	// SourceHash is the hex SHA-256 of the rule sources the set was built from.
	SourceHash string `json:"source_hash"`
	// UsesClock says whether some model reads the clock (Now::*).
	UsesClock bool `json:"uses_clock"`
	// Models are the rule set's models, in build order.
	Models []ModelInfo `json:"models"`
	// Statements are every SQL statement the set may run: the allow-list
	// that Knowledge.Bind checks. A lookup names one by its index here.
	Statements []Statement `json:"statements"`
}

// ModelInfo is one model of a rule set.
type ModelInfo struct {
	// Name is the model's `name :`; Model(name) routes to it.
	Name string `json:"name"`
	// Patterns are its `rule :` patterns: the rule paths it claims when
	// enabled.
	Patterns []string `json:"patterns"`
	// Enabled: an `enable : false` model is reached by name only.
	Enabled bool `json:"enabled"`
	// File is the rule file it was compiled from.
	File string `json:"file"`
	// Statements it may run: indices into RuleInfo.Statements.
	Statements []uint32 `json:"statements"`
	// Lookups are its lookups, in the order its rule writes them.
	Lookups []LookupInfo `json:"lookups"`
}

// LookupInfo is one lookup of a model.
type LookupInfo struct {
	// Statement is the index of its statement in RuleInfo.Statements.
	Statement uint32 `json:"statement"`
	// Line is where it stands in the model's file (1-based).
	Line uint32 `json:"line"`
	// SQL is the statement with this lookup's literals in place.
	SQL string `json:"sql"`
}

// parseInfo reads omlet_info's JSON.
func parseInfo(b []byte) (RuleInfo, error) {
	var info RuleInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return RuleInfo{}, fmt.Errorf("omlet_info is not the JSON of docs/abi.md: %w", err)
	}
	if info.ABI != abiVersion {
		return RuleInfo{}, fmt.Errorf("omlet_info says ABI %d, this runtime speaks %d", info.ABI, abiVersion)
	}
	for _, m := range info.Models {
		for _, s := range m.Statements {
			if int(s) >= len(info.Statements) {
				return RuleInfo{}, fmt.Errorf("model %s names statement %d of %d", m.Name, s, len(info.Statements))
			}
		}
	}
	return info, nil
}

// Model is the model named name, if the rule has one.
func (i *RuleInfo) Model(name string) (ModelInfo, bool) {
	for _, m := range i.Models {
		if m.Name == name {
			return m, true
		}
	}
	return ModelInfo{}, false
}
