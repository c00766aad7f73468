plugins {
    id("com.android.application")
    id("org.jetbrains.kotlin.android")
}

android {
    namespace = "org.kerasvit.sample"
    compileSdk = 35
    defaultConfig {
        applicationId = "org.kerasvit.sample"
        minSdk = 21
        targetSdk = 35
        versionCode = 1
        versionName = "1.0"
    }
    // the .tflite must stay uncompressed so the Interpreter can memory-map it
    androidResources { noCompress += "tflite" }
    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
    kotlinOptions { jvmTarget = "17" }
}

dependencies {
    // LiteRT's CompiledModel API (com.google.ai.edge.litert.CompiledModel), builtin ops only, no Flex delegate;
    // litert-gpu brings the GPU accelerator (without it the sample runs on the CPU, XNNPACK)
    implementation("com.google.ai.edge.litert:litert:2.3.0")
    implementation("com.google.ai.edge.litert:litert-gpu:2.3.0")
    implementation("androidx.appcompat:appcompat:1.7.0")
}
