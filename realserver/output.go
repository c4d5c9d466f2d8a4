package realserver

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// MarshalJSON writes an item with its fixes as commands.
func (it Item) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Check  string   `json:"check"`
		Status Status   `json:"status"`
		Detail string   `json:"detail"`
		Fix    []string `json:"fix,omitempty"`
		// Manual: the fix is left to the admin; setup does not run it.
		Manual bool `json:"manual,omitempty"`
	}{it.Check, it.Status, it.Detail, it.Commands(), it.Hint != "" && len(it.Fix) == 0})
}

// MarshalJSON writes the report with its verdict.
func (r Report) MarshalJSON() ([]byte, error) {
	items := r.Items
	if items == nil {
		items = []Item{}
	}
	return json.Marshal(struct {
		OK    bool   `json:"ok"`
		Items []Item `json:"items"`
	}{r.OK(), items})
}

// WriteText writes one line per item: its status, what it checks, the
// detail and, when it is not OK, the command that fixes it.
func WriteText(w io.Writer, r Report) {
	for _, it := range r.Items {
		line := fmt.Sprintf("%-4s  %s: %s", strings.ToUpper(it.Status.String()), it.Check, it.Detail)
		if cmds := it.Commands(); it.Status != OK && len(cmds) > 0 {
			line += "; fix: " + strings.Join(cmds, " && ")
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "%d ok, %d failing, %d warnings\n", r.Count(OK), r.Count(Fail), r.Count(Warn))
}
