package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/keepalived/conf"
	"github.com/lbdproject/lbd/keepalived/importer"
)

// exitIncomplete is `lbd import keepalived`'s status when it wrote a
// configuration but left something of keepalived's out.
const exitIncomplete = 3

// defaultKeepalivedConf is where keepalived reads its configuration.
const defaultKeepalivedConf = "/etc/keepalived/keepalived.conf"

func newImportCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "import",
		Short: "Write lbd's configuration from another load balancer's",
	}
	c.AddCommand(newImportKeepalivedCommand())
	return c
}

func newImportKeepalivedCommand() *cobra.Command {
	var dir, configID string
	c := &cobra.Command{
		Use:   "keepalived [FILE]",
		Short: "Write lbd's configuration from a keepalived.conf",
		Long: `Read FILE (default ` + defaultKeepalivedConf + `) as keepalived 2.2.7 does and
write lbd's TOML: to standard output, or with -o DIR as DIR/lbd.toml (global
tables) and DIR/conf.d/NAME.toml (one per service). What lbd cannot carry
over, or carries differently, is listed on standard error, one line per
item with its file:line. Exit status: 0 complete, 3 written but incomplete
(something is "not mapped" or "ignored"), 1 error (nothing written),
2 usage error. See docs/import-keepalived.md.`,
		Example: "  lbd import keepalived > /tmp/lbd.toml\n  lbd import keepalived /etc/keepalived/keepalived.conf -o /tmp/lbd",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			path := defaultKeepalivedConf
			if len(args) == 1 {
				path = args[0]
			}
			return runImportKeepalived(c.OutOrStdout(), c.ErrOrStderr(), path, dir, configID)
		},
	}
	c.Flags().StringVarP(&dir, "output", "o", "", "write DIR/lbd.toml and DIR/conf.d/*.toml instead of standard output")
	c.Flags().StringVar(&configID, "config-id", "", "keepalived's -i: the id conditional @id lines select (default: the host name's first label)")
	return c
}

func runImportKeepalived(stdout, stderr io.Writer, path, dir, configID string) error {
	cfg, err := conf.Parse(path, conf.Options{ConfigID: configID})
	if cfg != nil {
		for _, w := range cfg.Warnings {
			fmt.Fprintf(stderr, "%s: warning: %s\n", w.Pos, w.Msg)
		}
	}
	if err != nil {
		var list conf.ErrorList
		if errors.As(err, &list) {
			for _, p := range list {
				fmt.Fprintf(stderr, "%s: error: %s\n", p.Pos, p.Msg)
			}
			return &exitError{code: 1, err: fmt.Errorf("%s: %d errors reading the keepalived configuration: nothing written", path, len(list))}
		}
		return &exitError{code: 1, err: err}
	}
	res, err := importer.Import(cfg, importer.Options{})
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	if dir == "" {
		_, err = io.WriteString(stdout, res.TOML())
	} else {
		err = writeImport(dir, res)
	}
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	for _, it := range res.Report.Items {
		fmt.Fprintln(stderr, it)
	}
	if !res.Report.Complete() {
		return &exitError{code: exitIncomplete, err: fmt.Errorf("import incomplete: %d not mapped, %d ignored (listed above)",
			res.Report.Count(importer.NotMapped), res.Report.Count(importer.Ignored))}
	}
	return nil
}

// writeImport writes dir/lbd.toml and dir/conf.d/NAME.toml; existing
// files are not overwritten.
func writeImport(dir string, res importer.Result) error {
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		return err
	}
	files := map[string]string{filepath.Join(dir, "lbd.toml"): res.Globals}
	for _, s := range res.Services {
		files[filepath.Join(dir, "conf.d", s.Name+".toml")] = s.TOML
	}
	for name := range files {
		if _, err := os.Lstat(name); err == nil {
			return fmt.Errorf("%s exists: import into an empty directory", name)
		}
	}
	for name, text := range files {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}
