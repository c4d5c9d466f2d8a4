package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
)

func newCheckConfigCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check-config [PATH]",
		Short: "Validate the configuration without touching the kernel",
		Long: `Validate the configuration the daemon would load: PATH (default
` + config.DefaultPath + `) and every *.toml file in the conf.d directory
beside it. Every problem is reported with file:line:column, what is wrong
and what is accepted. Exit status: 0 valid, 1 invalid, 2 usage error.`,
		Example: "  lbd check-config\n  lbd check-config /tmp/staging/lbd.toml",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cfg, err := load(pathArg(args))
			if err != nil {
				return err
			}
			reals := 0
			for _, s := range cfg.Services {
				reals += len(s.RealServers)
			}
			fmt.Fprintf(c.OutOrStdout(), "configuration is valid: %d services, %d static real servers, from %d files:\n",
				len(cfg.Services), reals, len(cfg.Files))
			for _, f := range cfg.Files {
				fmt.Fprintf(c.OutOrStdout(), "  %s\n", f)
			}
			return nil
		},
	}
}

// pathArg is the optional PATH argument, the default path without one.
func pathArg(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	return config.DefaultPath
}

// load loads the configuration at path; an error exits 1.
func load(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	var list config.ErrorList
	switch {
	case errors.As(err, &list):
		return nil, &exitError{code: 1, err: fmt.Errorf("configuration is invalid: %w", list)}
	case err != nil:
		return nil, &exitError{code: 1, err: err}
	}
	return cfg, nil
}
