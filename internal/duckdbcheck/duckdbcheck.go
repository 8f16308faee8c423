// Package duckdbcheck reads the files the project writes with DuckDB, an
// independent reader, so that a test learns what a notebook would see: the
// column types DuckDB infers from a Parquet file and the values it reads.
//
// DuckDB runs in node through its package @duckdb/node-api, looked for in
// the node_modules directory named by GPUALLOC_DUCKDB_NODE_MODULES, else in
// the user's cache (gpualloc/duckdb-node/node_modules under
// os.UserCacheDir), where .ci/run installs it:
//
//	npm install --prefix ~/.cache/gpualloc/duckdb-node @duckdb/node-api
//
// A test on a machine without node or the package is skipped, not failed.
package duckdbcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Env names the node_modules directory that holds @duckdb/node-api.
const Env = "GPUALLOC_DUCKDB_NODE_MODULES"

// Timeout bounds one query: starting node, loading DuckDB and reading.
const Timeout = 2 * time.Minute

// A Result is what DuckDB returned for a query.
type Result struct {
	Columns []string // the columns' names
	Types   []string // the columns' DuckDB types, as DuckDB prints them ("BIGINT", "VARCHAR", "UBIGINT")
	// Rows hold the values as DuckDB's JSON conversion gives them: a
	// 64-bit integer is a decimal string, a 32-bit one a number (float64),
	// a string a string, NULL nil.
	Rows [][]any
}

// script runs the query given as its argument and prints the Result as JSON.
const script = `const { DuckDBInstance } = require('@duckdb/node-api');
(async () => {
  const db = await DuckDBInstance.create(':memory:');
  const conn = await db.connect();
  const r = await conn.runAndReadAll(process.argv[1]);
  process.stdout.write(JSON.stringify({
    Columns: r.columnNames(),
    Types: r.columnTypes().map(t => t.toString()),
    Rows: r.getRowsJson(),
  }));
})().catch(e => { process.stderr.write(String(e && e.message || e) + '\n'); process.exit(1); });
`

// Modules returns the node_modules directory that holds @duckdb/node-api,
// or "" when node or the package is absent.
func Modules() string {
	if _, err := exec.LookPath("node"); err != nil {
		return ""
	}
	dir := os.Getenv(Env)
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(cache, "gpualloc", "duckdb-node", "node_modules")
	}
	if _, err := os.Stat(filepath.Join(dir, "@duckdb", "node-api", "package.json")); err != nil {
		return ""
	}
	return dir
}

// Query runs sql in a fresh in-memory DuckDB and returns its result. It
// skips t when node or @duckdb/node-api is absent, and fails t when DuckDB
// reports an error.
func Query(t testing.TB, sql string) Result {
	t.Helper()
	mods := Modules()
	if mods == "" {
		t.Skipf("no DuckDB to read with: needs node on PATH and @duckdb/node-api in $%s or the user cache (see .ci/run)", Env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "-e", script, "--", sql)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("duckdb: %s: %v: %s", sql, err, strings.TrimSpace(errb.String()))
	}
	var r Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("duckdb: %s: reading node's output: %v", sql, err)
	}
	return r
}
