import java.sql.*;

/** What a JDBC BI tool does on connect: browse metadata, then run a prepared query repeatedly. */
public class Probe {
    public static void main(String[] args) throws Exception {
        try (Connection c = DriverManager.getConnection(args[0], args[1], args[2])) {
            DatabaseMetaData md = c.getMetaData();
            try (ResultSet rs = md.getTables(null, "public", "%", new String[] {"TABLE"})) {
                while (rs.next()) System.out.println("table " + rs.getString("TABLE_NAME"));
            }
            try (ResultSet rs = md.getColumns(null, "public", "people", "%")) {
                while (rs.next()) System.out.println("column " + rs.getString("COLUMN_NAME") + " " + rs.getString("TYPE_NAME"));
            }
            int types = 0;
            try (ResultSet rs = md.getTypeInfo()) {
                while (rs.next()) types++;
            }
            System.out.println("types " + types);
            try (ResultSet rs = md.getSchemas()) {
                while (rs.next()) System.out.println("schema " + rs.getString("TABLE_SCHEM"));
            }
            try (PreparedStatement ps = c.prepareStatement("SELECT COUNT(*) AS n FROM people WHERE age > ?")) {
                for (int i = 0; i < 6; i++) {
                    ps.setInt(1, 30 + i);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        System.out.println("count " + rs.getLong("n"));
                    }
                }
            }
            try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SHOW dpsql.budget")) {
                rs.next();
                System.out.println("queries " + rs.getLong("queries"));
            }
        }
    }
}
