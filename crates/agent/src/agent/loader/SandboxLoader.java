// Pre-started JVM languages: a JVM that readies a language's runtime (unless a request
// is waiting already), then waits for a request line on descriptor 3: {"path": ...}.
// Its first argument names the language (none: Java); the others are the language's
// class path (a folder ending in `/*` stands for its jars), loaded by a class loader of
// its own whose parent (the application class loader) does not see this loader's
// classes: a program's class named like one of them is the program's.
//
// - java: javac loaded and warmed up. The program is compiled in memory, as `java
//   Main.java` does (the first class declared is run; its file name need not match);
//   {"compiled": true|false} goes to descriptor 4, then either the compiler's
//   diagnostics and exit 1, or the class's main runs in this JVM.
// - clojure: clojure.core and clojure.main loaded and a form evaluated; the program
//   runs as `clojure.main main.clj` runs it.
// - groovy: Groovy's compiler and runtime warmed by a script; the program is compiled
//   first (the result on descriptor 4: a syntax error is a compile error, printed as
//   `groovy` prints it), then run as `groovy main.groovy` runs it.
// - kotlin: the compiler (its class path: kotlin-compiler.jar) loaded and warmed by a
//   compile; the program is compiled in this JVM to /tmp/.build/main.jar, as `kotlinc`
//   does (reported on descriptor 4), then its main class runs here with the Kotlin
//   standard library beside the compiler's jar.
import com.sun.source.tree.ClassTree;
import com.sun.source.tree.CompilationUnitTree;
import com.sun.source.tree.Tree;
import com.sun.source.util.JavacTask;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.URI;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.jar.JarFile;
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

    /** A language's runtime, readied ahead of its program. */
    interface Language {
        /** Loads and warms what every program needs. */
        void warm() throws Exception;

        /** Runs the program at `path` to its end, as the language's command would. */
        void run(Path path) throws Exception;
    }

    public static void main(String[] args) throws Exception {
        Language language = language(args);
        FileInputStream requests = new FileInputStream("/proc/self/fd/3");
        if (requests.available() == 0) {
            // Nobody waits yet: warm the runtime up. A request already waiting (a cold
            // start) goes first.
            language.warm();
        }
        String request = readRequest(requests);
        if (request == null) {
            System.exit(0); // discarded: no program came
        }
        if (language instanceof Resident resident && request.contains("\"session\":true")) {
            while (request != null) {
                int code = resident.runKept(Path.of(pathOf(request)));
                System.out.flush();
                System.err.flush();
                try (OutputStream done = new FileOutputStream("/proc/self/fd/4")) {
                    String report = "{\"exit\":" + code + ",\"run\":" + runOf(request) + "}\n";
                    done.write(report.getBytes(StandardCharsets.UTF_8));
                }
                request = readRequest(requests);
            }
            return;
        }
        language.run(Path.of(pathOf(request)));
    }

    /** A language whose loader serves a session's runs, keeping what they define. */
    interface Resident {
        /** Runs the program at `path` among what the runs before it defined: its status. */
        int runKept(Path path) throws Exception;
    }

    /** The "run" number of a session's request (written by the agent), 0 when absent. */
    static long runOf(String request) {
        int key = request.indexOf("\"run\":");
        if (key < 0) {
            return 0;
        }
        int start = key + "\"run\":".length();
        int end = start;
        while (end < request.length() && Character.isDigit(request.charAt(end))) {
            end++;
        }
        return end > start ? Long.parseLong(request.substring(start, end)) : 0;
    }

    /** The language the arguments name, its runtime on a class loader of its own. */
    static Language language(String[] args) throws Exception {
        if (args.length == 0 || args[0].equals("java")) {
            return new Java();
        }
        List<Path> classPath = new ArrayList<>();
        for (String entry : List.of(args).subList(1, args.length)) {
            classPath.addAll(expand(entry));
        }
        return switch (args[0]) {
            case "clojure" -> new Clojure(loaderOf(classPath));
            case "groovy" -> new Groovy(loaderOf(classPath));
            case "kotlin" -> new Kotlin(classPath);
            default -> throw new IllegalArgumentException("no loader for " + args[0]);
        };
    }

    /** A class path entry's jars: `folder/*` stands for the folder's, sorted. */
    static List<Path> expand(String entry) throws IOException {
        if (!entry.endsWith("/*")) {
            return List.of(Path.of(entry));
        }
        try (var jars = Files.list(Path.of(entry.substring(0, entry.length() - 2)))) {
            return jars.filter(p -> p.toString().endsWith(".jar")).sorted().toList();
        }
    }

    /**
     * A class loader of `classPath` whose parent, the application class loader, sees the
     * JDK but not this loader's classes; made the thread's context class loader.
     */
    static ClassLoader loaderOf(List<Path> classPath) throws IOException {
        URL[] urls = new URL[classPath.size()];
        for (int i = 0; i < urls.length; i++) {
            urls[i] = classPath.get(i).toUri().toURL();
        }
        ClassLoader loader = new URLClassLoader(urls, SandboxLoader.class.getClassLoader().getParent());
        Thread.currentThread().setContextClassLoader(loader);
        return loader;
    }

    /** Writes on descriptor 4 whether the program compiled. */
    static void report(boolean compiled) throws IOException {
        try (OutputStream done = new FileOutputStream("/proc/self/fd/4")) {
            done.write(("{\"compiled\":" + compiled + "}\n").getBytes(StandardCharsets.UTF_8));
        }
    }

    /** Java: javac in this JVM, the program's classes in memory. */
    static final class Java implements Language {
        private final JavaCompiler javac = ToolProvider.getSystemJavaCompiler();

        @Override
        public void warm() throws IOException {
            compile(javac, "Warm.java",
                    "class Warm { public static void main(String[] a) { System.out.println(a.length); } }");
        }

        @Override
        public void run(Path path) throws Exception {
            String source = Files.readString(path, StandardCharsets.UTF_8);
            Compiled program = compile(javac, path.getFileName().toString(), source);
            boolean ok = program.first() != null;
            report(ok);
            System.err.print(program.diagnostics()); // the errors, or warnings
            if (!ok) {
                System.err.flush();
                System.exit(1);
            }
            SandboxLoader.run(program);
        }
    }

    /** The next request line, or null when the pipe closed without one. */
    static String readRequest(FileInputStream requests) throws IOException {
        ByteArrayOutputStream line = new ByteArrayOutputStream();
        int b;
        while ((b = requests.read()) >= 0 && b != '\n') {
            line.write(b);
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
        invokeMain(Class.forName(program.first(), false, loader), loader);
    }

    /**
     * Runs `main`'s main method as the java launcher would, uncaught exceptions included,
     * with `loader` as the thread's context class loader.
     */
    static void invokeMain(Class<?> main, ClassLoader loader) throws Exception {
        Method entry;
        try {
            entry = main.getMethod("main", String[].class);
        } catch (NoSuchMethodException e) {
            System.err.println("error: can't find main(String[]) method in class: " + main.getName());
            System.exit(1);
            return;
        }
        if (!Modifier.isStatic(entry.getModifiers())) {
            System.err.println("error: 'main' method is not declared 'public static'");
            System.exit(1);
        }
        entry.setAccessible(true); // as the launcher: a class need not be public
        Thread.currentThread().setContextClassLoader(loader);
        int below = depth();
        try {
            entry.invoke(null, (Object) new String[0]);
        } catch (InvocationTargetException e) {
            uncaught(e.getCause(), below);
        }
    }

    /** The number of frames below (and including) the caller's. */
    static int depth() {
        return new Throwable().getStackTrace().length - 1;
    }

    /**
     * Drops from `thrown`'s trace the frames below the program's: the `below` frames of
     * the loader that called it (its [`depth`]) and the reflection calls above them, so
     * that it shows as the language's own command shows it.
     */
    static void trim(Throwable thrown, int below) {
        StackTraceElement[] frames = thrown.getStackTrace();
        int own = Math.max(0, frames.length - below);
        while (own > 0 && (frames[own - 1].getClassName().startsWith("jdk.internal.reflect.")
                || frames[own - 1].getClassName().startsWith("java.lang.reflect."))) {
            own--;
        }
        thrown.setStackTrace(Arrays.copyOf(frames, own));
    }

    /** Ends the JVM as an exception out of the program's main thread would. */
    static void uncaught(Throwable cause, int below) {
        trim(cause, below);
        Thread.UncaughtExceptionHandler handler = Thread.currentThread().getUncaughtExceptionHandler();
        handler.uncaughtException(Thread.currentThread(), cause);
        System.exit(1);
    }
}


/**
 * Clojure: clojure.core and clojure.main loaded; a program runs as `clojure.main main.clj`.
 * In a session, each run is loaded into the namespace the run before ended in (`user`
 * first), so that its definitions persist; an uncaught exception is reported as
 * clojure.main reports it (without the report file) and makes the run's status 1.
 * `System/exit` ends the JVM, and so the session's state.
 */
final class Clojure implements SandboxLoader.Language, SandboxLoader.Resident {
    /** Loads a file in the session's namespace, with clojure.main's bindings: its status. */
    private static final String SESSION_RUN = """
            (let [current (atom (the-ns 'user))]
              (intern (create-ns 'sandbox.session) 'current current)
              (fn [path]
                (clojure.main/with-bindings
                  (set! *ns* @current)
                  (try
                    ;; Loading binds *ns*: a form after the program's records where it ended.
                    (clojure.lang.Compiler/load
                      (java.io.StringReader.
                        (str (slurp path) "\n(clojure.core/reset! sandbox.session/current clojure.core/*ns*)\n"))
                      path
                      (.getName (java.io.File. path)))
                    0
                    (catch Throwable t
                      (binding [*out* *err*]
                        (print (-> t Throwable->map clojure.main/ex-triage clojure.main/ex-str)))
                      1)
                    (finally
                      (flush)
                      (binding [*out* *err*] (flush)))))))
            """;

    private final ClassLoader loader;
    private Object session;

    Clojure(ClassLoader loader) {
        this.loader = loader;
    }

    @Override
    public void warm() throws Exception {
        Class<?> api = Class.forName("clojure.java.api.Clojure", true, loader);
        Method var = api.getMethod("var", Object.class, Object.class);
        Method read = api.getMethod("read", String.class);
        Method invoke = Class.forName("clojure.lang.IFn", false, loader).getMethod("invoke", Object.class);
        invoke.invoke(var.invoke(null, "clojure.core", "require"), read.invoke(null, "clojure.main"));
        invoke.invoke(var.invoke(null, "clojure.core", "eval"), read.invoke(null, "(reduce + (map inc (range 100)))"));
    }

    @Override
    public int runKept(Path path) throws Exception {
        Class<?> api = Class.forName("clojure.java.api.Clojure", true, loader);
        Method invoke = Class.forName("clojure.lang.IFn", false, loader).getMethod("invoke", Object.class);
        if (session == null) {
            Method var = api.getMethod("var", Object.class, Object.class);
            Object read = var.invoke(null, "clojure.core", "read-string");
            invoke.invoke(var.invoke(null, "clojure.core", "require"), api.getMethod("read", String.class).invoke(null, "clojure.main"));
            session = invoke.invoke(var.invoke(null, "clojure.core", "eval"), invoke.invoke(read, SESSION_RUN));
        }
        return ((Number) invoke.invoke(session, path.toString())).intValue();
    }

    @Override
    public void run(Path path) throws Exception {
        Method main = Class.forName("clojure.main", true, loader).getMethod("main", String[].class);
        int below = SandboxLoader.depth();
        try {
            // Reports what the program throws and exits 1 itself, as it does from a shell.
            main.invoke(null, (Object) new String[] {path.toString()});
        } catch (InvocationTargetException e) {
            SandboxLoader.uncaught(e.getCause(), below);
        }
    }
}

/** Groovy: its compiler and runtime warmed by a script; a program compiled, then run. */
final class Groovy implements SandboxLoader.Language {
    private final ClassLoader loader;

    Groovy(ClassLoader loader) {
        this.loader = loader;
    }

    @Override
    public void warm() throws Exception {
        Object shell = Class.forName("groovy.lang.GroovyShell", true, loader).getConstructor().newInstance();
        shell.getClass().getMethod("evaluate", String.class).invoke(shell,
                "def squares = (1..10).collect { it * it }\nassert squares.sum() == 385\n\"${squares.size()}\"");
    }

    @Override
    public void run(Path path) throws Exception {
        Class<?> shellClass = Class.forName("groovy.lang.GroovyShell", true, loader);
        Object shell = shellClass.getConstructor().newInstance();
        Object classes = shellClass.getMethod("getClassLoader").invoke(shell);
        Class<?> sourceClass = Class.forName("groovy.lang.GroovyCodeSource", true, loader);
        Object source = sourceClass.getConstructor(File.class, String.class).newInstance(path.toFile(), "UTF-8");
        Class<?> script;
        try {
            script = (Class<?>) classes.getClass().getMethod("parseClass", sourceClass, boolean.class)
                    .invoke(classes, source, false);
        } catch (InvocationTargetException e) {
            Class<?> failed = Class.forName("org.codehaus.groovy.control.CompilationFailedException", false, loader);
            if (!failed.isInstance(e.getCause())) {
                throw e;
            }
            SandboxLoader.report(false);
            System.err.println(e.getCause()); // as `groovy` prints it
            System.exit(1);
            return;
        }
        SandboxLoader.report(true);
        // What GroovyShell.run does with the class it parsed: a script, or a class's main.
        Method run = shellClass.getDeclaredMethod("runScriptOrMainOrTestOrRunnable", Class.class, String[].class);
        run.setAccessible(true);
        int below = SandboxLoader.depth();
        try {
            run.invoke(shell, script, new String[0]);
        } catch (InvocationTargetException e) {
            caught(e.getCause(), below);
        }
    }

    /** Ends the JVM as `groovy` does when a script throws: "Caught: ...", the trace, 1. */
    private void caught(Throwable thrown, int below) throws Exception {
        Class<?> wrapper = Class.forName("org.codehaus.groovy.runtime.InvokerInvocationException", false, loader);
        Throwable e = wrapper.isInstance(thrown) && thrown.getCause() != null ? thrown.getCause() : thrown;
        SandboxLoader.trim(e, below);
        System.err.println("Caught: " + e);
        Class.forName("org.codehaus.groovy.runtime.StackTraceUtils", true, loader)
                .getMethod("deepSanitize", Throwable.class).invoke(null, e);
        e.printStackTrace();
        System.exit(1);
    }
}

/**
 * Kotlin: the compiler loaded (its class path: kotlin-compiler.jar, in kotlinc's `lib`)
 * and warmed by a compile; a program compiled in this JVM, then its main class run with
 * the standard library of the same `lib`.
 */
final class Kotlin implements SandboxLoader.Language {
    private final Path lib;
    private final Object compiler;
    private final Method exec;

    Kotlin(List<Path> classPath) throws Exception {
        if (classPath.isEmpty()) {
            throw new IllegalArgumentException("kotlin: no class path for the compiler");
        }
        ClassLoader loader = SandboxLoader.loaderOf(classPath);
        Class<?> k2 = Class.forName("org.jetbrains.kotlin.cli.jvm.K2JVMCompiler", true, loader);
        compiler = k2.getConstructor().newInstance();
        exec = k2.getMethod("exec", PrintStream.class, String[].class);
        lib = classPath.get(0).toAbsolutePath().getParent();
    }

    /** Compiles `source` into `jar`: its diagnostics, null when it did not compile. */
    private String[] compile(Path source, Path jar) throws Exception {
        ByteArrayOutputStream said = new ByteArrayOutputStream();
        PrintStream messages = new PrintStream(said, true, StandardCharsets.UTF_8);
        Object code = exec.invoke(compiler, messages, (Object) new String[] {
            "-nowarn", "-kotlin-home", lib.getParent().toString(), source.toString(), "-d", jar.toString()});
        return new String[] {String.valueOf(code), said.toString(StandardCharsets.UTF_8)};
    }

    @Override
    public void warm() throws Exception {
        Path folder = Files.createTempDirectory("kotlin-warm");
        Path source = folder.resolve("warm.kt");
        Files.writeString(source, "fun main() { println(listOf(1, 2).map { it * 2 }.sum()) }\n");
        try {
            compile(source, folder.resolve("warm.jar"));
        } finally {
            try (var files = Files.list(folder)) {
                for (Path file : files.toList()) {
                    Files.deleteIfExists(file);
                }
            }
            Files.delete(folder);
        }
    }

    @Override
    public void run(Path path) throws Exception {
        Path build = Path.of("/tmp/.build");
        Files.createDirectories(build);
        Path jar = build.resolve("main.jar");
        Files.deleteIfExists(jar);
        String[] compiled = compile(path, jar);
        boolean ok = compiled[0].equals("OK");
        SandboxLoader.report(ok);
        System.err.print(compiled[1]);
        if (!ok) {
            System.err.flush();
            System.exit(1);
        }
        String main;
        try (JarFile built = new JarFile(jar.toFile())) {
            var manifest = built.getManifest();
            main = manifest == null ? null : manifest.getMainAttributes().getValue("Main-Class");
        }
        if (main == null) {
            System.err.println("no main manifest attribute, in " + jar);
            System.exit(1);
        }
        ClassLoader program = new URLClassLoader(
                new URL[] {jar.toUri().toURL(), lib.resolve("kotlin-stdlib.jar").toUri().toURL()},
                SandboxLoader.class.getClassLoader().getParent());
        SandboxLoader.invokeMain(Class.forName(main, false, program), program);
    }
}
