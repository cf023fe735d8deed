// node's pg and postgres.js against dpsql serve: aggregates, parameters, IN lists (postgres.js
// writes IN ($1,$2)), arrays (= ANY($1)) and SHOW dpsql.budget.
import pg from "pg";
import postgres from "postgres";

const port = Number(process.env.DPSQL_PORT), password = process.env.DPSQL_PASSWORD;
const out = {};
const client = new pg.Client({ host: "127.0.0.1", port, user: "alice", password, database: "dpsql" });
await client.connect();
out.pg_grouped = (await client.query("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex")).rows.length;
out.pg_param = (await client.query("SELECT COUNT(*) AS n FROM people WHERE age > $1", [30])).rows.length;
out.pg_any = (await client.query("SELECT name FROM places WHERE name = ANY($1) ORDER BY 1", [["north", "south"]])).rows
  .map((r) => r.name);
out.pg_budget = Object.keys((await client.query("SHOW dpsql.budget")).rows[0]).includes("epsilon_remaining");
await client.end();

const sql = postgres({ host: "127.0.0.1", port, user: "alice", password, database: "dpsql", max: 1 });
out.js_grouped = (await sql`SELECT sex, COUNT(*) AS n FROM people GROUP BY sex`).length;
out.js_in = (await sql`SELECT name FROM places WHERE name IN ${sql(["north", "east"])} ORDER BY 1`).map((r) => r.name);
out.js_param = (await sql`SELECT COUNT(*) AS n FROM people WHERE city = ${"Oslo"}`).length;
out.js_any = (await sql`SELECT name FROM places WHERE name = ANY(${["south"]})`).map((r) => r.name);
try {
  await sql`SELECT * FROM people`;
  out.js_rows = "answered";
} catch (e) {
  out.js_rows = e.code;
}
await sql.end();
console.log(JSON.stringify(out));
