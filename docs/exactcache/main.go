// main.go
package main

import (
	"os"

	"github.com/gpualloc/gpualloc/cli"
	_ "github.com/gpualloc/gpualloc/strategy/all" // the built-in strategies, to compare against
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
