"""PostgreSQL 15's pg_catalog tables, as data: each table's columns and their type OIDs (with
information_schema's from information_schema.py), the tables that are empty here, what pg_settings
lists, and the fixed OIDs."""

from __future__ import annotations

import re

from ..wire import types as c
from .information_schema import INFORMATION_SCHEMA_TABLES

PUBLIC, PG_CATALOG, INFORMATION_SCHEMA = 2200, 11, 13000
PG_TEMP, PG_TEMP_NAME = 16000, "pg_temp_3"  # where a session's temporary views are listed
FIRST_VIEW_OID = 40000
FIRST_FUNCTION_OID = 50000
FIRST_IO_FUNCTION_OID = 51000
FIRST_TABLE_OID = 16385
OWNER = 10
DATABASE_OID = 16384


# (column, PostgreSQL type OID). DuckDB storage types follow from the OID (pg_types._STORAGE).
TABLES: dict[str, list[tuple[str, int]]] = {
    # a set-returning function read as a table (DBeaver asks for the keywords on connect)
    "pg_get_keywords": [
        ("word", c.TEXT),
        ("catcode", c.CHAR),
        ("barelabel", c.BOOL),
        ("catdesc", c.TEXT),
        ("baredesc", c.TEXT),
    ],
    "pg_namespace": [("oid", c.OID), ("nspname", c.NAME), ("nspowner", c.OID), ("nspacl", c.ACLITEM_ARRAY)],
    "pg_class": [
        ("oid", c.OID),
        ("relname", c.NAME),
        ("relnamespace", c.OID),
        ("reltype", c.OID),
        ("reloftype", c.OID),
        ("relowner", c.OID),
        ("relam", c.OID),
        ("relfilenode", c.OID),
        ("reltablespace", c.OID),
        ("relpages", c.INT4),
        ("reltuples", c.FLOAT4),
        ("relallvisible", c.INT4),
        ("reltoastrelid", c.OID),
        ("relhasindex", c.BOOL),
        ("relisshared", c.BOOL),
        ("relpersistence", c.CHAR),
        ("relkind", c.CHAR),
        ("relnatts", c.INT2),
        ("relchecks", c.INT2),
        ("relhasrules", c.BOOL),
        ("relhastriggers", c.BOOL),
        ("relhassubclass", c.BOOL),
        ("relrowsecurity", c.BOOL),
        ("relforcerowsecurity", c.BOOL),
        ("relispopulated", c.BOOL),
        ("relreplident", c.CHAR),
        ("relispartition", c.BOOL),
        ("relrewrite", c.OID),
        ("relacl", c.ACLITEM_ARRAY),
        ("reloptions", c.TEXT_ARRAY),
        ("relpartbound", c.TEXT),
        ("relfrozenxid", c.TEXT),
        ("relminmxid", c.TEXT),
    ],
    "pg_attribute": [
        ("attrelid", c.OID),
        ("attname", c.NAME),
        ("atttypid", c.OID),
        ("attstattarget", c.INT4),
        ("attlen", c.INT2),
        ("attnum", c.INT2),
        ("attndims", c.INT4),
        ("attcacheoff", c.INT4),
        ("atttypmod", c.INT4),
        ("attbyval", c.BOOL),
        ("attalign", c.CHAR),
        ("attstorage", c.CHAR),
        ("attcompression", c.CHAR),
        ("attnotnull", c.BOOL),
        ("atthasdef", c.BOOL),
        ("atthasmissing", c.BOOL),
        ("attidentity", c.CHAR),
        ("attgenerated", c.CHAR),
        ("attisdropped", c.BOOL),
        ("attislocal", c.BOOL),
        ("attinhcount", c.INT4),
        ("attcollation", c.OID),
        ("attacl", c.ACLITEM_ARRAY),
        ("attoptions", c.TEXT_ARRAY),
        ("attfdwoptions", c.TEXT_ARRAY),
        ("attmissingval", c.TEXT),
    ],
    "pg_type": [
        ("oid", c.OID),
        ("typname", c.NAME),
        ("typnamespace", c.OID),
        ("typowner", c.OID),
        ("typlen", c.INT2),
        ("typbyval", c.BOOL),
        ("typtype", c.CHAR),
        ("typcategory", c.CHAR),
        ("typispreferred", c.BOOL),
        ("typisdefined", c.BOOL),
        ("typdelim", c.CHAR),
        ("typrelid", c.OID),
        ("typelem", c.OID),
        ("typarray", c.OID),
        ("typinput", c.REGPROC),
        ("typoutput", c.REGPROC),
        ("typreceive", c.REGPROC),
        ("typsend", c.REGPROC),
        ("typbasetype", c.OID),
        ("typtypmod", c.INT4),
        ("typndims", c.INT4),
        ("typcollation", c.OID),
        ("typnotnull", c.BOOL),
        ("typalign", c.CHAR),
        ("typstorage", c.CHAR),
        ("typdefault", c.TEXT),
        ("typsubscript", c.REGPROC),
        ("typmodin", c.REGPROC),
        ("typmodout", c.REGPROC),
        ("typanalyze", c.REGPROC),
        ("typdefaultbin", c.TEXT),
        ("typacl", c.ACLITEM_ARRAY),
    ],
    "pg_database": [
        ("oid", c.OID),
        ("datname", c.NAME),
        ("datdba", c.OID),
        ("encoding", c.INT4),
        ("datlocprovider", c.CHAR),
        ("datistemplate", c.BOOL),
        ("datallowconn", c.BOOL),
        ("datconnlimit", c.INT4),
        ("datcollate", c.TEXT),
        ("datctype", c.TEXT),
        ("daticulocale", c.TEXT),
        ("datcollversion", c.TEXT),
        ("datacl", c.ACLITEM_ARRAY),
        ("dattablespace", c.OID),
        ("datfrozenxid", c.TEXT),
        ("datminmxid", c.TEXT),
    ],
    "pg_roles": [
        ("oid", c.OID),
        ("rolname", c.NAME),
        ("rolsuper", c.BOOL),
        ("rolinherit", c.BOOL),
        ("rolcreaterole", c.BOOL),
        ("rolcreatedb", c.BOOL),
        ("rolcanlogin", c.BOOL),
        ("rolreplication", c.BOOL),
        ("rolconnlimit", c.INT4),
        ("rolbypassrls", c.BOOL),
        ("rolconfig", c.TEXT_ARRAY),
        ("rolpassword", c.TEXT),
        ("rolvaliduntil", c.TIMESTAMPTZ),
    ],
    "pg_user": [
        ("usename", c.NAME),
        ("usesysid", c.OID),
        ("usecreatedb", c.BOOL),
        ("usesuper", c.BOOL),
        ("userepl", c.BOOL),
        ("usebypassrls", c.BOOL),
        ("useconfig", c.TEXT_ARRAY),
        ("passwd", c.TEXT),
        ("valuntil", c.TIMESTAMPTZ),
    ],
    "pg_am": [("oid", c.OID), ("amname", c.NAME), ("amhandler", c.REGPROC), ("amtype", c.CHAR)],
    "pg_index": [
        ("indexrelid", c.OID),
        ("indrelid", c.OID),
        ("indnatts", c.INT2),
        ("indnkeyatts", c.INT2),
        ("indisunique", c.BOOL),
        ("indnullsnotdistinct", c.BOOL),
        ("indisprimary", c.BOOL),
        ("indisexclusion", c.BOOL),
        ("indimmediate", c.BOOL),
        ("indisclustered", c.BOOL),
        ("indisvalid", c.BOOL),
        ("indcheckxmin", c.BOOL),
        ("indisready", c.BOOL),
        ("indislive", c.BOOL),
        ("indisreplident", c.BOOL),
        ("indkey", c.INT2VECTOR),
        ("indcollation", c.OIDVECTOR),
        ("indclass", c.OIDVECTOR),
        ("indoption", c.INT2VECTOR),
        ("indexprs", c.TEXT),
        ("indpred", c.TEXT),
    ],
    "pg_constraint": [
        ("oid", c.OID),
        ("conname", c.NAME),
        ("connamespace", c.OID),
        ("contype", c.CHAR),
        ("condeferrable", c.BOOL),
        ("condeferred", c.BOOL),
        ("convalidated", c.BOOL),
        ("conrelid", c.OID),
        ("contypid", c.OID),
        ("conindid", c.OID),
        ("conparentid", c.OID),
        ("confrelid", c.OID),
        ("confupdtype", c.CHAR),
        ("confdeltype", c.CHAR),
        ("confmatchtype", c.CHAR),
        ("conislocal", c.BOOL),
        ("coninhcount", c.INT4),
        ("connoinherit", c.BOOL),
        ("conkey", c.INT2_ARRAY),
        ("confkey", c.INT2_ARRAY),
        ("conbin", c.TEXT),
        ("conpfeqop", c.OID_ARRAY),
        ("conppeqop", c.OID_ARRAY),
        ("conffeqop", c.OID_ARRAY),
        ("confdelsetcols", c.INT2_ARRAY),
        ("conexclop", c.OID_ARRAY),
    ],
    "pg_attrdef": [("oid", c.OID), ("adrelid", c.OID), ("adnum", c.INT2), ("adbin", c.TEXT)],
    "pg_description": [("objoid", c.OID), ("classoid", c.OID), ("objsubid", c.INT4), ("description", c.TEXT)],
    "pg_inherits": [("inhrelid", c.OID), ("inhparent", c.OID), ("inhseqno", c.INT4), ("inhdetachpending", c.BOOL)],
    "pg_tablespace": [
        ("oid", c.OID),
        ("spcname", c.NAME),
        ("spcowner", c.OID),
        ("spcacl", c.ACLITEM_ARRAY),
        ("spcoptions", c.TEXT_ARRAY),
    ],
    # Empty: dpsql exposes no functions of its own. pgcli's completion loader reads these columns.
    "pg_proc": [
        ("oid", c.OID),
        ("proname", c.NAME),
        ("pronamespace", c.OID),
        ("prorettype", c.OID),
        ("prokind", c.CHAR),
        ("proargnames", c.TEXT_ARRAY),
        ("proallargtypes", c.OID_ARRAY),
        ("proargtypes", c.OID_ARRAY),
        ("proargmodes", c.CHAR_ARRAY),
        ("proretset", c.BOOL),
        ("proargdefaults", c.TEXT),
        ("prosrc", c.TEXT),
        ("prolang", c.OID),
        ("proisagg", c.BOOL),
        ("proiswindow", c.BOOL),
        ("proowner", c.OID),
        ("procost", c.FLOAT4),
        ("prorows", c.FLOAT4),
        ("provariadic", c.OID),
        ("prosupport", c.REGPROC),
        ("prosecdef", c.BOOL),
        ("proleakproof", c.BOOL),
        ("proisstrict", c.BOOL),
        ("provolatile", c.CHAR),
        ("proparallel", c.CHAR),
        ("pronargs", c.INT2),
        ("pronargdefaults", c.INT2),
        ("protrftypes", c.OID_ARRAY),
        ("probin", c.TEXT),
        ("prosqlbody", c.TEXT),
        ("proconfig", c.TEXT_ARRAY),
        ("proacl", c.ACLITEM_ARRAY),
    ],
    "pg_language": [
        ("oid", c.OID),
        ("lanname", c.NAME),
        ("lanowner", c.OID),
        ("lanispl", c.BOOL),
        ("lanpltrusted", c.BOOL),
        ("lanplcallfoid", c.OID),
        ("laninline", c.OID),
        ("lanvalidator", c.OID),
        ("lanacl", c.ACLITEM_ARRAY),
    ],
    "pg_settings": [
        ("name", c.TEXT),
        ("setting", c.TEXT),
        ("unit", c.TEXT),
        ("category", c.TEXT),
        ("short_desc", c.TEXT),
        ("extra_desc", c.TEXT),
        ("context", c.TEXT),
        ("vartype", c.TEXT),
        ("source", c.TEXT),
        ("min_val", c.TEXT),
        ("max_val", c.TEXT),
        ("enumvals", c.TEXT_ARRAY),
        ("boot_val", c.TEXT),
        ("reset_val", c.TEXT),
        ("sourcefile", c.TEXT),
        ("sourceline", c.INT4),
        ("pending_restart", c.BOOL),
    ],
    "pg_stats": [
        ("schemaname", c.NAME),
        ("tablename", c.NAME),
        ("attname", c.NAME),
        ("inherited", c.BOOL),
        ("null_frac", c.FLOAT4),
        ("avg_width", c.INT4),
        ("n_distinct", c.FLOAT4),
        ("most_common_vals", c.TEXT),
        ("most_common_freqs", c.TEXT),
        ("histogram_bounds", c.TEXT),
        ("correlation", c.FLOAT4),
        ("most_common_elems", c.TEXT),
        ("most_common_elem_freqs", c.TEXT),
        ("elem_count_histogram", c.TEXT),
    ],
    "pg_stat_user_tables": [
        ("relid", c.OID),
        ("schemaname", c.NAME),
        ("relname", c.NAME),
        ("seq_scan", c.INT8),
        ("seq_tup_read", c.INT8),
        ("idx_scan", c.INT8),
        ("idx_tup_fetch", c.INT8),
        ("n_tup_ins", c.INT8),
        ("n_tup_upd", c.INT8),
        ("n_tup_del", c.INT8),
        ("n_tup_hot_upd", c.INT8),
        ("n_live_tup", c.INT8),
        ("n_dead_tup", c.INT8),
        ("n_mod_since_analyze", c.INT8),
        ("n_ins_since_vacuum", c.INT8),
        ("last_vacuum", c.TIMESTAMPTZ),
        ("last_autovacuum", c.TIMESTAMPTZ),
        ("last_analyze", c.TIMESTAMPTZ),
        ("last_autoanalyze", c.TIMESTAMPTZ),
        ("vacuum_count", c.INT8),
        ("autovacuum_count", c.INT8),
        ("analyze_count", c.INT8),
        ("autoanalyze_count", c.INT8),
    ],
    "pg_statistic_ext": [
        ("oid", c.OID),
        ("stxrelid", c.OID),
        ("stxname", c.NAME),
        ("stxnamespace", c.OID),
        ("stxowner", c.OID),
        ("stxstattarget", c.INT4),
        ("stxkeys", c.INT2VECTOR),
        ("stxkind", c.CHAR_ARRAY),
        ("stxexprs", c.TEXT),
    ],
    "pg_policy": [
        ("oid", c.OID),
        ("polname", c.NAME),
        ("polrelid", c.OID),
        ("polcmd", c.CHAR),
        ("polpermissive", c.BOOL),
        ("polroles", c.OID_ARRAY),
        ("polqual", c.TEXT),
        ("polwithcheck", c.TEXT),
    ],
    "pg_publication": [
        ("oid", c.OID),
        ("pubname", c.NAME),
        ("pubowner", c.OID),
        ("puballtables", c.BOOL),
        ("pubinsert", c.BOOL),
        ("pubupdate", c.BOOL),
        ("pubdelete", c.BOOL),
        ("pubtruncate", c.BOOL),
        ("pubviaroot", c.BOOL),
    ],
    "pg_publication_namespace": [("oid", c.OID), ("pnpubid", c.OID), ("pnnspid", c.OID)],
    "pg_publication_rel": [
        ("oid", c.OID),
        ("prpubid", c.OID),
        ("prrelid", c.OID),
        ("prqual", c.TEXT),
        ("prattrs", c.INT2_ARRAY),
    ],
    "pg_trigger": [
        ("oid", c.OID),
        ("tgrelid", c.OID),
        ("tgparentid", c.OID),
        ("tgname", c.NAME),
        ("tgfoid", c.OID),
        ("tgtype", c.INT2),
        ("tgenabled", c.CHAR),
        ("tgisinternal", c.BOOL),
        ("tgconstrrelid", c.OID),
        ("tgconstrindid", c.OID),
        ("tgconstraint", c.OID),
        ("tgdeferrable", c.BOOL),
        ("tginitdeferred", c.BOOL),
        ("tgnargs", c.INT2),
        ("tgattr", c.INT2VECTOR),
        ("tgargs", c.BYTEA),
        ("tgqual", c.TEXT),
        ("tgoldtable", c.NAME),
        ("tgnewtable", c.NAME),
    ],
    "pg_rewrite": [
        ("oid", c.OID),
        ("rulename", c.NAME),
        ("ev_class", c.OID),
        ("ev_type", c.CHAR),
        ("ev_enabled", c.CHAR),
        ("is_instead", c.BOOL),
        ("ev_qual", c.TEXT),
        ("ev_action", c.TEXT),
    ],
    "pg_opclass": [
        ("oid", c.OID),
        ("opcmethod", c.OID),
        ("opcname", c.NAME),
        ("opcnamespace", c.OID),
        ("opcowner", c.OID),
        ("opcfamily", c.OID),
        ("opcintype", c.OID),
        ("opcdefault", c.BOOL),
        ("opckeytype", c.OID),
    ],
    "pg_collation": [
        ("oid", c.OID),
        ("collname", c.NAME),
        ("collnamespace", c.OID),
        ("collowner", c.OID),
        ("collprovider", c.CHAR),
        ("collisdeterministic", c.BOOL),
        ("collencoding", c.INT4),
        ("collcollate", c.TEXT),
        ("collctype", c.TEXT),
        ("colliculocale", c.TEXT),
        ("collversion", c.TEXT),
    ],
    "pg_enum": [("oid", c.OID), ("enumtypid", c.OID), ("enumsortorder", c.FLOAT4), ("enumlabel", c.NAME)],
    "pg_extension": [
        ("oid", c.OID),
        ("extname", c.NAME),
        ("extowner", c.OID),
        ("extnamespace", c.OID),
        ("extrelocatable", c.BOOL),
        ("extversion", c.TEXT),
        ("extconfig", c.OID_ARRAY),
        ("extcondition", c.TEXT_ARRAY),
    ],
    "pg_range": [
        ("rngtypid", c.OID),
        ("rngsubtype", c.OID),
        ("rngmultitypid", c.OID),
        ("rngcollation", c.OID),
        ("rngsubopc", c.OID),
        ("rngcanonical", c.REGPROC),
        ("rngsubdiff", c.REGPROC),
    ],
    "pg_sequence": [
        ("seqrelid", c.OID),
        ("seqtypid", c.OID),
        ("seqstart", c.INT8),
        ("seqincrement", c.INT8),
        ("seqmax", c.INT8),
        ("seqmin", c.INT8),
        ("seqcache", c.INT8),
        ("seqcycle", c.BOOL),
    ],
    "pg_foreign_table": [("ftrelid", c.OID), ("ftserver", c.OID), ("ftoptions", c.TEXT_ARRAY)],
    "pg_partitioned_table": [("partrelid", c.OID), ("partstrat", c.CHAR)],
    "pg_depend": [
        ("classid", c.OID),
        ("objid", c.OID),
        ("objsubid", c.INT4),
        ("refclassid", c.OID),
        ("refobjid", c.OID),
        ("refobjsubid", c.INT4),
        ("deptype", c.CHAR),
    ],
    "pg_event_trigger": [
        ("oid", c.OID),
        ("evtname", c.NAME),
        ("evtevent", c.NAME),
        ("evtowner", c.OID),
        ("evtfoid", c.OID),
        ("evtenabled", c.CHAR),
        ("evttags", c.TEXT_ARRAY),
    ],
    "pg_matviews": [("schemaname", c.NAME), ("matviewname", c.NAME), ("definition", c.TEXT)],
    "pg_views": [("schemaname", c.NAME), ("viewname", c.NAME), ("definition", c.TEXT)],
    "pg_tables": [
        ("schemaname", c.NAME),
        ("tablename", c.NAME),
        ("tableowner", c.NAME),
        ("tablespace", c.NAME),
        ("hasindexes", c.BOOL),
        ("hasrules", c.BOOL),
        ("hastriggers", c.BOOL),
        ("rowsecurity", c.BOOL),
    ],
    # Empty: dpsql has no role memberships and no user-defined routines.
    "pg_auth_members": [
        ("oid", c.OID),
        ("roleid", c.OID),
        ("member", c.OID),
        ("grantor", c.OID),
        ("admin_option", c.BOOL),
    ],
    # information_schema (stored as is_<name>; information_schema.py)
    **INFORMATION_SCHEMA_TABLES,
    "pg_indexes": [
        ("schemaname", c.NAME),
        ("tablename", c.NAME),
        ("indexname", c.NAME),
        ("tablespace", c.NAME),
        ("indexdef", c.TEXT),
    ],
}


# Catalog tables and views that are empty here (dpsql has none of these objects, or shows none:
# other sessions' activity and locks are not an analyst's business), read by pgAdmin's tree and
# dashboard and by drivers: "table column:type ...", PostgreSQL 15's columns, a line continued
# by indented ones; a type is a constant's name in wire/types.py.
_EMPTY_TABLES = """
pg_seclabels objoid:oid classoid:oid objsubid:int4 objtype:text objnamespace:oid objname:text provider:text
    label:text
pg_seclabel objoid:oid classoid:oid objsubid:int4 provider:text label:text
pg_cast oid:oid castsource:oid casttarget:oid castfunc:oid castcontext:char castmethod:char
pg_default_acl oid:oid defaclrole:oid defaclnamespace:oid defaclobjtype:char defaclacl:aclitem_array
pg_stat_activity datid:oid datname:name pid:int4 leader_pid:int4 usesysid:oid usename:name application_name:text
    client_addr:text client_hostname:text client_port:int4 backend_start:timestamptz xact_start:timestamptz
    query_start:timestamptz state_change:timestamptz wait_event_type:text wait_event:text state:text
    backend_xid:text backend_xmin:text query_id:int8 query:text backend_type:text
pg_shdescription objoid:oid classoid:oid description:text
pg_ts_template oid:oid tmplname:name tmplnamespace:oid tmplinit:regproc tmpllexize:regproc
pg_ts_parser oid:oid prsname:name prsnamespace:oid prsstart:regproc prstoken:regproc prsend:regproc
    prsheadline:regproc prslextype:regproc
pg_ts_dict oid:oid dictname:name dictnamespace:oid dictowner:oid dicttemplate:oid dictinitoption:text
pg_ts_config oid:oid cfgname:name cfgnamespace:oid cfgowner:oid cfgparser:oid
pg_subscription oid:oid subdbid:oid subskiplsn:text subname:name subowner:oid subenabled:bool subbinary:bool
    substream:bool subtwophasestate:char subdisableonerr:bool subconninfo:text subslotname:name subsynccommit:text
    subpublications:text_array
pg_stat_gssapi pid:int4 gss_authenticated:bool principal:text encrypted:bool
pg_replication_slots slot_name:name plugin:name slot_type:text datoid:oid database:name temporary:bool active:bool
    active_pid:int4 xmin:text catalog_xmin:text restart_lsn:text confirmed_flush_lsn:text wal_status:text
    safe_wal_size:int8 two_phase:bool
pg_prepared_xacts transaction:text gid:text prepared:timestamptz owner:name database:name
pg_operator oid:oid oprname:name oprnamespace:oid oprowner:oid oprkind:char oprcanmerge:bool oprcanhash:bool
    oprleft:oid oprright:oid oprresult:oid oprcom:oid oprnegate:oid oprcode:regproc oprrest:regproc oprjoin:regproc
pg_locks locktype:text database:oid relation:oid page:int4 tuple:int2 virtualxid:text transactionid:text classid:oid
    objid:oid objsubid:int2 virtualtransaction:text pid:int4 mode:text granted:bool fastpath:bool
    waitstart:timestamptz
pg_foreign_data_wrapper oid:oid fdwname:name fdwowner:oid fdwhandler:oid fdwvalidator:oid fdwacl:aclitem_array
    fdwoptions:text_array
pg_db_role_setting setdatabase:oid setrole:oid setconfig:text_array
pg_aggregate aggfnoid:regproc aggkind:char aggnumdirectargs:int2 aggtransfn:regproc aggfinalfn:regproc
    aggcombinefn:regproc aggserialfn:regproc aggdeserialfn:regproc aggmtransfn:regproc aggminvtransfn:regproc
    aggmfinalfn:regproc aggfinalextra:bool aggmfinalextra:bool aggfinalmodify:char aggmfinalmodify:char
    aggsortop:oid aggtranstype:oid aggtransspace:int4 aggmtranstype:oid aggmtransspace:int4 agginitval:text
    aggminitval:text
pg_available_extensions name:name default_version:text comment:text
pg_foreign_server oid:oid srvname:name srvowner:oid srvfdw:oid srvtype:text srvversion:text srvacl:aclitem_array
    srvoptions:text_array
pg_user_mapping oid:oid umuser:oid umserver:oid umoptions:text_array
pg_stat_database datid:oid datname:name numbackends:int4 xact_commit:int8 xact_rollback:int8 blks_read:int8
    blks_hit:int8 tup_returned:int8 tup_fetched:int8 tup_inserted:int8 tup_updated:int8 tup_deleted:int8
    conflicts:int8 temp_files:int8 temp_bytes:int8 deadlocks:int8 checksum_failures:int8
    checksum_last_failure:timestamptz blk_read_time:float8 blk_write_time:float8 session_time:float8
    active_time:float8 idle_in_transaction_time:float8 sessions:int8 sessions_abandoned:int8 sessions_fatal:int8
    sessions_killed:int8 stats_reset:timestamptz
pg_sequences schemaname:name sequencename:name sequenceowner:name data_type:regtype start_value:int8 min_value:int8
    max_value:int8 increment_by:int8 cycle:bool cache_size:int8 last_value:int8
pg_stat_ssl pid:int4 ssl:bool version:text cipher:text bits:int4 client_dn:text client_serial:numeric issuer_dn:text
pg_shseclabel objoid:oid classoid:oid provider:text label:text
pg_init_privs objoid:oid classoid:oid objsubid:int4 privtype:char initprivs:aclitem_array
pg_transform oid:oid trftype:oid trflang:oid trffromsql:regproc trftosql:regproc
pg_conversion oid:oid conname:name connamespace:oid conowner:oid conforencoding:int4 contoencoding:int4
    conproc:regproc condefault:bool
pg_opfamily oid:oid opfmethod:oid opfname:name opfnamespace:oid opfowner:oid
pg_amop oid:oid amopfamily:oid amoplefttype:oid amoprighttype:oid amopstrategy:int2 amoppurpose:char amopopr:oid
    amopmethod:oid amopsortfamily:oid
pg_amproc oid:oid amprocfamily:oid amproclefttype:oid amprocrighttype:oid amprocnum:int2 amproc:regproc
pg_statistic_ext_data stxoid:oid stxdinherit:bool stxdndistinct:text stxddependencies:text stxdmcv:text
    stxdexpr:text
pg_stat_replication pid:int4 usesysid:oid usename:name application_name:text client_addr:text client_hostname:text
    client_port:int4 backend_start:timestamptz backend_xmin:text state:text sent_lsn:text write_lsn:text
    flush_lsn:text replay_lsn:text write_lag:interval flush_lag:interval replay_lag:interval sync_priority:int4
    sync_state:text reply_time:timestamptz
pg_stat_subscription subid:oid subname:name pid:int4 relid:oid received_lsn:text last_msg_send_time:timestamptz
    last_msg_receipt_time:timestamptz latest_end_lsn:text latest_end_time:timestamptz
pg_ts_config_map mapcfg:oid maptokentype:int4 mapseqno:int4 mapdict:oid
pg_largeobject_metadata oid:oid lomowner:oid lomacl:aclitem_array
pg_show_all_settings name:text setting:text unit:text category:text short_desc:text extra_desc:text context:text
    vartype:text source:text min_val:text max_val:text enumvals:text_array boot_val:text reset_val:text
    sourcefile:text sourceline:int4 pending_restart:bool
pg_stat_all_tables relid:oid schemaname:name relname:name seq_scan:int8 seq_tup_read:int8 idx_scan:int8
    idx_tup_fetch:int8 n_tup_ins:int8 n_tup_upd:int8 n_tup_del:int8 n_tup_hot_upd:int8 n_live_tup:int8
    n_dead_tup:int8 n_mod_since_analyze:int8 n_ins_since_vacuum:int8 last_vacuum:timestamptz
    last_autovacuum:timestamptz last_analyze:timestamptz last_autoanalyze:timestamptz vacuum_count:int8
    autovacuum_count:int8 analyze_count:int8 autoanalyze_count:int8
pg_shdepend dbid:oid classid:oid objid:oid objsubid:int4 refclassid:oid refobjid:oid deptype:char
pg_statio_all_tables relid:oid schemaname:name relname:name heap_blks_read:int8 heap_blks_hit:int8
    idx_blks_read:int8 idx_blks_hit:int8 toast_blks_read:int8 toast_blks_hit:int8 tidx_blks_read:int8
    tidx_blks_hit:int8
pg_stat_all_indexes relid:oid indexrelid:oid schemaname:name relname:name indexrelname:name idx_scan:int8
    idx_tup_read:int8 idx_tup_fetch:int8
pg_statio_user_tables relid:oid schemaname:name relname:name heap_blks_read:int8 heap_blks_hit:int8
    idx_blks_read:int8 idx_blks_hit:int8 toast_blks_read:int8 toast_blks_hit:int8 tidx_blks_read:int8
    tidx_blks_hit:int8
pg_stat_user_indexes relid:oid indexrelid:oid schemaname:name relname:name indexrelname:name idx_scan:int8
    idx_tup_read:int8 idx_tup_fetch:int8
pg_stat_user_functions funcid:oid schemaname:name funcname:name calls:int8 total_time:float8 self_time:float8
"""
for _spec in re.split(r"\n(?=\S)", _EMPTY_TABLES.strip()):
    _name, *_columns = _spec.split()
    TABLES[_name] = [(col, getattr(c, typ.upper())) for col, typ in (part.split(":") for part in _columns)]

# What pg_settings lists (the values a client reads there; SHOW answers from the session).
_SETTINGS = {
    "server_version": "15.0",
    "server_version_num": "150000",
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "standard_conforming_strings": "on",
    "max_identifier_length": "63",
    "integer_datetimes": "on",
    "TimeZone": "UTC",
    "DateStyle": "ISO, MDY",
    "bytea_output": "hex",
}


# PostgreSQL's own OIDs of the catalog tables clients name in regclass casts (pg_description's
# classoid is 1259 for a table's comment: SQLAlchemy joins on 'pg_catalog.pg_class'::regclass).
_CATALOG_OIDS = {
    "pg_class": 1259,
    "pg_type": 1247,
    "pg_attribute": 1249,
    "pg_proc": 1255,
    "pg_namespace": 2615,
    "pg_description": 2609,
    "pg_constraint": 2606,
    "pg_index": 2610,
    "pg_database": 1262,
    "pg_authid": 1260,
    "pg_am": 2601,
    "pg_attrdef": 2604,
    "pg_inherits": 2611,
    "pg_trigger": 2620,
    "pg_aggregate": 2600,
    "pg_cast": 2605,
    "pg_collation": 3456,
    "pg_conversion": 2607,
    "pg_default_acl": 826,
    "pg_enum": 3501,
    "pg_event_trigger": 3466,
    "pg_extension": 3079,
    "pg_foreign_data_wrapper": 2328,
    "pg_foreign_server": 1417,
    "pg_foreign_table": 3118,
    "pg_language": 2612,
    "pg_opclass": 2616,
    "pg_operator": 2617,
    "pg_opfamily": 2753,
    "pg_publication": 6104,
    "pg_rewrite": 2618,
    "pg_sequence": 2224,
    "pg_statistic_ext": 3381,
    "pg_subscription": 6100,
    "pg_tablespace": 1213,
    "pg_transform": 3576,
    "pg_ts_config": 3602,
    "pg_ts_dict": 3600,
    "pg_ts_parser": 3601,
    "pg_ts_template": 3764,
    "pg_user_mapping": 1418,
}


def _full_rows(table: str, rows: list[tuple | dict]) -> list[tuple]:
    """Rows of a catalog table, each a tuple in the table's column order or a dict by column
    name (PostgreSQL's wide views and tables: the columns a row does not give are NULL)."""
    columns = [name for name, _ in TABLES[table]]
    return [
        tuple(r.get(col) for col in columns) if isinstance(r, dict) else tuple(r) + (None,) * (len(columns) - len(r))
        for r in rows
    ]
