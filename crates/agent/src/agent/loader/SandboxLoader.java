// Pre-started Java: a JVM with the Java compiler loaded and warmed up (unless a request
// is waiting already), waiting for a request line on descriptor 3: {"path": ...}. It
// compiles the program in memory, as `java Main.java` does (the first class declared is
// run; its file name need not match), writes {"compiled": true|false} on descriptor 4,
// then either prints the compiler's diagnostics and exits 1, or runs the class's main in
// this JVM. The program's classes are loaded by a class loader of their own, whose parent
// (the application class loader) does not see this loader's classes: a program's class
// named like one of them is the program's.
import com.sun.source.tree.ClassTree;
import com.sun.source.tree.CompilationUnitTree;
import com.sun.source.tree.Tree;
import com.sun.source.util.JavacTask;
import java.io.ByteArrayOutputStream;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import javax.tools.FileObject;
import javax.tools.ForwardingJavaFileManager;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileManager;
import javax.tools.JavaFileObject;
import javax.tools.SimpleJavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;

public class SandboxLoader {
    /** A program compiled in memory: its classes' bytes and the first class declared. */
    record Compiled(Map<String, byte[]> classes, String first, String diagnostics) {}

    public static void main(String[] args) throws Exception {
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        FileInputStream requests = new FileInputStream("/proc/self/fd/3");
        if (requests.available() == 0) {
            // Nobody waits yet: compile a class, so that the program's compile finds javac
            // loaded and its code compiled. A request already waiting (a cold start) goes
            // first.
            compile(javac, "Warm.java",
                    "class Warm { public static void main(String[] a) { System.out.println(a.length); } }");
        }
        String request = readRequest(requests);
        if (request == null) {
            System.exit(0); // discarded: no program came
        }
        String path = pathOf(request);
        String source = Files.readString(Path.of(path), StandardCharsets.UTF_8);
        Compiled program = compile(javac, Path.of(path).getFileName().toString(), source);
        boolean ok = program.first() != null;
        try (OutputStream done = new FileOutputStream("/proc/self/fd/4")) {
            done.write(("{\"compiled\":" + ok + "}\n").getBytes(StandardCharsets.UTF_8));
        }
        if (!ok) {
            System.err.print(program.diagnostics());
            System.err.flush();
            System.exit(1);
        }
        System.err.print(program.diagnostics()); // warnings
        run(program);
    }

    /** The request line, or null when the pipe closed without one. */
    static String readRequest(FileInputStream requests) throws IOException {
        ByteArrayOutputStream line = new ByteArrayOutputStream();
        try (FileInputStream in = requests) {
            int b;
            while ((b = in.read()) >= 0 && b != '\n') {
                line.write(b);
            }
        }
        String text = line.toString(StandardCharsets.UTF_8).trim();
        return text.isEmpty() ? null : text;
    }

    /** The "path" string of a request (JSON written by the agent). */
    static String pathOf(String request) {
        int key = request.indexOf("\"path\"");
        int start = request.indexOf('"', request.indexOf(':', key) + 1) + 1;
        StringBuilder path = new StringBuilder();
        for (int i = start; i < request.length(); i++) {
            char c = request.charAt(i);
            if (c == '"') {
                break;
            }
            if (c == '\\') {
                char e = request.charAt(++i);
                if (e == 'u') {
                    path.append((char) Integer.parseInt(request.substring(i + 1, i + 5), 16));
                    i += 4;
                } else {
                    path.append(switch (e) {
                        case 'n' -> '\n';
                        case 't' -> '\t';
                        case 'r' -> '\r';
                        case 'b' -> '\b';
                        case 'f' -> '\f';
                        default -> e;
                    });
                }
            } else {
                path.append(c);
            }
        }
        return path.toString();
    }

    /** Compiles `source` in memory; `first` is null when it does not compile. */
    static Compiled compile(JavaCompiler javac, String name, String source) throws IOException {
        StringWriter diagnostics = new StringWriter();
        Map<String, ByteArrayOutputStream> out = new HashMap<>();
        StandardJavaFileManager standard = javac.getStandardFileManager(null, null, StandardCharsets.UTF_8);
        JavaFileManager files = new ForwardingJavaFileManager<>(standard) {
            @Override
            public JavaFileObject getJavaFileForOutput(Location location, String className,
                    JavaFileObject.Kind kind, FileObject sibling) {
                return new SimpleJavaFileObject(URI.create("mem:///" + className.replace('.', '/') + ".class"), kind) {
                    @Override
                    public OutputStream openOutputStream() {
                        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
                        out.put(className, bytes);
                        return bytes;
                    }
                };
            }
        };
        JavaFileObject unit = new SimpleJavaFileObject(URI.create("string:///" + name), JavaFileObject.Kind.SOURCE) {
            @Override
            public CharSequence getCharContent(boolean ignoreEncodingErrors) {
                return source;
            }

            @Override
            public boolean isNameCompatible(String simpleName, JavaFileObject.Kind kind) {
                return true; // as `java Main.java`: a public class of any name
            }
        };
        JavacTask task = (JavacTask) javac.getTask(new PrintWriter(diagnostics), files, null,
                List.of("-proc:none", "-Xlint:deprecation"), null, List.of(unit));
        String first = null;
        for (CompilationUnitTree tree : task.parse()) {
            for (Tree type : tree.getTypeDecls()) {
                if (first == null && type instanceof ClassTree declared) {
                    String pkg = tree.getPackageName() == null ? "" : tree.getPackageName() + ".";
                    first = pkg + declared.getSimpleName();
                }
            }
        }
        boolean ok;
        try {
            task.generate();
            ok = diagnostics.toString().lines().noneMatch(l -> l.contains(": error:"));
        } catch (IllegalStateException e) {
            ok = false;
        }
        files.close();
        String shown = diagnostics.toString().replace("/" + name + ":", name + ":");
        long errors = shown.lines().filter(l -> l.startsWith(name + ":") && l.contains(": error:")).count();
        if (errors > 0) {
            shown += errors + (errors == 1 ? " error\n" : " errors\n");
        }
        Map<String, byte[]> classes = new HashMap<>();
        out.forEach((k, v) -> classes.put(k, v.toByteArray()));
        return new Compiled(classes, ok && !classes.isEmpty() ? first : null, shown);
    }

    /** Runs the program's main as the java launcher would, uncaught exceptions included. */
    static void run(Compiled program) throws Exception {
        ClassLoader loader = new ClassLoader(SandboxLoader.class.getClassLoader().getParent()) {
            @Override
            protected Class<?> findClass(String name) throws ClassNotFoundException {
                byte[] bytes = program.classes().get(name);
                if (bytes == null) {
                    throw new ClassNotFoundException(name);
                }
                return defineClass(name, bytes, 0, bytes.length);
            }
        };
        Class<?> main = Class.forName(program.first(), false, loader);
        Method entry;
        try {
            entry = main.getMethod("main", String[].class);
        } catch (NoSuchMethodException e) {
            System.err.println("error: can't find main(String[]) method in class: " + program.first());
            System.exit(1);
            return;
        }
        if (!Modifier.isStatic(entry.getModifiers())) {
            System.err.println("error: 'main' method is not declared 'public static'");
            System.exit(1);
        }
        entry.setAccessible(true); // as the launcher: a class need not be public
        Thread.currentThread().setContextClassLoader(loader);
        try {
            entry.invoke(null, (Object) new String[0]);
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            // The frames below the program's main are this loader's: shown as the
            // launcher shows them, without.
            StackTraceElement[] frames = cause.getStackTrace();
            int own = 0;
            while (own < frames.length && !frames[own].getClassName().startsWith("jdk.internal.reflect.")) {
                own++;
            }
            cause.setStackTrace(java.util.Arrays.copyOf(frames, own));
            Thread.UncaughtExceptionHandler handler = Thread.currentThread().getUncaughtExceptionHandler();
            handler.uncaughtException(Thread.currentThread(), cause);
            System.exit(1);
        }
    }
}
